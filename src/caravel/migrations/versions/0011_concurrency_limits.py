"""Concurrency limits.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03

Jobs get a ``partition_key`` (NULL for every existing job, which per-key limits read as its
tenant), and ``caravel_queue_limits`` holds each limited queue's caps. A new nullable column and
a new table: nothing existing is rewritten. The running jobs a limited claim counts are read
from ``ix_caravel_jobs_leases`` (running jobs by lease expiry), so no index is added.

The downgrade drops both: stored limits go (the queues run unlimited), and so do the jobs'
partition keys.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from caravel.migrations.dialects import before_mariadb
from caravel.migrations.losses import LossKind

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

#: What this downgrade deletes (:mod:`caravel.migrations.losses`): each queue's stored limits.
LOSSES = (
    LossKind(
        "queue_limits",
        "queue limit",
        "queue limits",
        "deleted",
        ("caravel_queue_limits",),
        "SELECT count(*) FROM caravel_queue_limits",
    ),
)


@before_mariadb
def upgrade() -> None:
    op.add_column("caravel_jobs", sa.Column("partition_key", sa.String(128), nullable=True))
    op.create_table(
        "caravel_queue_limits",
        sa.Column("queue", sa.String(64), nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=True),
        sa.Column("per_key", sa.Integer(), nullable=True),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("queue", name="pk_caravel_queue_limits"),
        sa.CheckConstraint(
            "(concurrency IS NULL OR concurrency >= 1) AND (per_key IS NULL OR per_key >= 1)"
            " AND (concurrency IS NOT NULL OR per_key IS NOT NULL)",
            name="ck_caravel_queue_limits_positive",
        ),
    )


@before_mariadb
def downgrade() -> None:
    op.drop_table("caravel_queue_limits")
    # SQLite 3.35+ drops a column that no index or constraint names, in place.
    op.drop_column("caravel_jobs", "partition_key")
