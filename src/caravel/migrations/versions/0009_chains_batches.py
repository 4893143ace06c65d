"""Chains and batches.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02

Jobs get the columns that link a chain's steps (``chain_id``, ``chain_step``, ``chain_next``),
a batch's members (``batch_id``) and what a released job is handed (``upstream``); all are NULL
for other jobs, so existing rows are not rewritten. ``caravel_batches`` holds each batch's
counts. The triggers of :mod:`caravel.migrations.release_triggers` release a held step or
callback in the transaction that finishes what it waits for.

The downgrade drops the triggers, so a job still held would wait forever (due in 9999): it
dead-letters each held chain step and batch callback instead (``last_failure`` ``ReleaseLost``),
keeping its payload and key where an operator can see it and replay it, or delete it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from caravel.clock import SystemClock
from caravel.limits import HELD_DUE_AT
from caravel.migrations import release_triggers
from caravel.migrations.dialects import before_mariadb
from caravel.migrations.losses import LossKind

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_HELD = f"state = 'ready' AND due_at = {HELD_DUE_AT}"

#: What this downgrade takes (:mod:`caravel.migrations.losses`): the held jobs it dead-letters
#: (a held job that is not a chain step is a batch's callback) and the batches' rows.
LOSSES = (
    LossKind(
        "held_chain_steps",
        "held chain step",
        "held chain steps",
        "dead_lettered",
        ("caravel_jobs",),
        f"SELECT count(*) FROM caravel_jobs WHERE {_HELD} AND chain_id IS NOT NULL",
    ),
    LossKind(
        "held_batch_callbacks",
        "held batch callback",
        "held batch callbacks",
        "dead_lettered",
        ("caravel_jobs",),
        f"SELECT count(*) FROM caravel_jobs WHERE {_HELD} AND chain_id IS NULL",
    ),
    LossKind(
        "batches",
        "batch record",
        "batch records",
        "deleted",
        ("caravel_batches",),
        "SELECT count(*) FROM caravel_batches",
    ),
)

_COLUMNS = (
    ("chain_id", sa.Uuid()),
    ("chain_step", sa.Integer()),
    ("chain_next", sa.Uuid()),
    ("batch_id", sa.Uuid()),
    ("upstream", sa.Text()),
)


@before_mariadb
def upgrade() -> None:
    for name, type_ in _COLUMNS:
        op.add_column("caravel_jobs", sa.Column(name, type_, nullable=True))
    for name, columns, where in (
        ("ix_caravel_jobs_chain", ["chain_id", "chain_step"], "chain_id IS NOT NULL"),
        ("ix_caravel_jobs_batch", ["batch_id", "state"], "batch_id IS NOT NULL"),
    ):
        op.create_index(
            name,
            "caravel_jobs",
            columns,
            postgresql_where=sa.text(where),
            sqlite_where=sa.text(where),
        )
    op.create_table(
        "caravel_batches",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("completed", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("dead_letter", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("cancelled", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("callback_id", sa.Uuid(), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("finished_at", sa.BigInteger(), nullable=True),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_caravel_batches"),
    )
    op.create_index("ix_caravel_batches_created", "caravel_batches", ["created_at"])
    postgresql = op.get_bind().dialect.name == "postgresql"
    for statement in (
        release_triggers.POSTGRESQL_CREATE if postgresql else release_triggers.SQLITE_CREATE
    ):
        op.execute(statement)


@before_mariadb
def downgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    for statement in (
        release_triggers.POSTGRESQL_DROP if postgresql else release_triggers.SQLITE_DROP
    ):
        op.execute(statement)
    # After the triggers went, so dead-lettering a held job releases nothing.
    now = SystemClock().now_ms()
    op.execute(
        sa.text(
            "UPDATE caravel_jobs SET state = 'dead_letter', due_at = :now, available_at = NULL,"
            " lease_expires_at = NULL, finished_at = :now, updated_at = :now,"
            f" last_failure = :why WHERE {_HELD}"
        ).bindparams(now=now, why="ReleaseLost")
    )
    op.drop_table("caravel_batches")
    op.drop_index("ix_caravel_jobs_batch", table_name="caravel_jobs")
    op.drop_index("ix_caravel_jobs_chain", table_name="caravel_jobs")
    for name, _ in reversed(_COLUMNS):
        op.drop_column("caravel_jobs", name)
