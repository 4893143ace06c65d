"""Failure insight: the attempt history, progress and metadata.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06

``caravel_attempts`` keeps one row per attempt of a job (who ran it, when, how it ended, the
category, exception class and a detail only when a handler marked it safe), keyed by job and
lease token. Jobs get ``worker_id`` (the worker holding the current or last lease),
``progress`` and ``progress_at`` (what a running handler reported), ``meta`` (a JSON object a
handler set) and ``attempts_dropped`` (records deleted to keep a job's history bounded).

The downgrade drops the table and the columns: every attempt record, progress and metadata goes.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from caravel.migrations.dialects import before_mariadb
from caravel.migrations.losses import LossKind

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

_OUTCOMES = (
    "completed",
    "failed",
    "snoozed",
    "cancelled",
    "timed_out",
    "lease_expired",
    "discarded",
    "abandoned",
)

#: What this downgrade deletes (:mod:`caravel.migrations.losses`).
LOSSES = (
    LossKind(
        "attempt_records",
        "attempt record",
        "attempt records",
        "deleted",
        ("caravel_attempts",),
        "SELECT count(*) FROM caravel_attempts",
    ),
    LossKind(
        "job_progress",
        "job's progress or metadata",
        "jobs' progress or metadata",
        "deleted",
        ("caravel_jobs",),
        "SELECT count(*) FROM caravel_jobs WHERE progress IS NOT NULL OR meta IS NOT NULL",
    ),
)

_COLUMNS = ("worker_id", "progress", "progress_at", "meta", "attempts_dropped")


@before_mariadb
def upgrade() -> None:
    op.create_table(
        "caravel_attempts",
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("lease_token", sa.BigInteger(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("worker_id", sa.Uuid(), nullable=True),
        sa.Column("host", sa.String(255), nullable=True),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("claimed_at", sa.BigInteger(), nullable=True),
        sa.Column("finished_at", sa.BigInteger(), nullable=True),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("category", sa.String(32), nullable=True),
        sa.Column("error_class", sa.String(200), nullable=True),
        sa.Column("detail", sa.String(500), nullable=True),
        sa.Column("retry_at", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("job_id", "lease_token", name="pk_caravel_attempts"),
        sa.CheckConstraint(
            "outcome IN (" + ", ".join(f"'{o}'" for o in _OUTCOMES) + ")",
            name="ck_caravel_attempts_outcome",
        ),
    )
    op.add_column("caravel_jobs", sa.Column("worker_id", sa.Uuid(), nullable=True))
    op.add_column("caravel_jobs", sa.Column("progress", sa.Text(), nullable=True))
    op.add_column("caravel_jobs", sa.Column("progress_at", sa.BigInteger(), nullable=True))
    op.add_column("caravel_jobs", sa.Column("meta", sa.Text(), nullable=True))
    op.add_column(
        "caravel_jobs",
        sa.Column("attempts_dropped", sa.Integer(), nullable=False, server_default=sa.text("0")),
    )


@before_mariadb
def downgrade() -> None:
    # None of the columns is in a constraint or an index: SQLite drops them in place too.
    for column in reversed(_COLUMNS):
        op.drop_column("caravel_jobs", column)
    op.drop_table("caravel_attempts")
