"""Chains and batches.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02

Jobs get the columns that link a chain's steps (``chain_id``, ``chain_step``, ``chain_next``),
a batch's members (``batch_id``) and what a released job is handed (``upstream``); all are NULL
for other jobs, so existing rows are not rewritten. ``caravel_batches`` holds each batch's
counts. The triggers of :mod:`caravel.migrations.release_triggers` release a held step or
callback in the transaction that finishes what it waits for.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from caravel.migrations import release_triggers

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_COLUMNS = (
    ("chain_id", sa.Uuid()),
    ("chain_step", sa.Integer()),
    ("chain_next", sa.Uuid()),
    ("batch_id", sa.Uuid()),
    ("upstream", sa.Text()),
)


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


def downgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    for statement in (
        release_triggers.POSTGRESQL_DROP if postgresql else release_triggers.SQLITE_DROP
    ):
        op.execute(statement)
    op.drop_table("caravel_batches")
    op.drop_index("ix_caravel_jobs_batch", table_name="caravel_jobs")
    op.drop_index("ix_caravel_jobs_chain", table_name="caravel_jobs")
    for name, _ in reversed(_COLUMNS):
        op.drop_column("caravel_jobs", name)
