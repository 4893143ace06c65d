"""Rate limits.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06

``caravel_queue_limits`` gets each queue's rates (``rate``, ``rate_per_key``, the window
``rate_period_ms``), and a row may now hold rates without concurrency caps; jobs get a
``weight`` (NULL for every existing job, read as 1); ``caravel_queue_starts`` logs the starts of
rate-limited queues for the sliding window. New nullable columns and a new table: nothing
existing is rewritten (SQLite copies the small limits table to change its check).

The downgrade drops them: stored rates go (a queue with only a rate loses its row and runs
unlimited), and so do the jobs' weights and the log of starts.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from caravel.migrations.dialects import before_mariadb
from caravel.migrations.losses import LossKind

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

#: What this downgrade deletes (:mod:`caravel.migrations.losses`): each queue's stored rates.
LOSSES = (
    LossKind(
        "queue_rates",
        "queue rate limit",
        "queue rate limits",
        "deleted",
        ("caravel_queue_limits",),
        "SELECT count(*) FROM caravel_queue_limits WHERE rate_period_ms IS NOT NULL",
    ),
)

_CHECK = "ck_caravel_queue_limits_positive"
_OLD_RULE = (
    "(concurrency IS NULL OR concurrency >= 1) AND (per_key IS NULL OR per_key >= 1)"
    " AND (concurrency IS NOT NULL OR per_key IS NOT NULL)"
)
_NEW_RULE = (
    "(concurrency IS NULL OR concurrency >= 1) AND (per_key IS NULL OR per_key >= 1)"
    " AND (rate IS NULL OR rate >= 1) AND (rate_per_key IS NULL OR rate_per_key >= 1)"
    " AND ((rate IS NULL AND rate_per_key IS NULL) = (rate_period_ms IS NULL))"
    " AND (concurrency IS NOT NULL OR per_key IS NOT NULL OR rate_period_ms IS NOT NULL)"
)


@before_mariadb
def upgrade() -> None:
    op.add_column("caravel_jobs", sa.Column("weight", sa.Integer(), nullable=True))
    with op.batch_alter_table("caravel_queue_limits") as batch:
        batch.add_column(sa.Column("rate", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("rate_per_key", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("rate_period_ms", sa.Integer(), nullable=True))
        batch.drop_constraint(_CHECK, type_="check")
        batch.create_check_constraint(_CHECK, sa.text(_NEW_RULE))
    op.create_table(
        "caravel_queue_starts",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("queue", sa.String(64), nullable=False),
        sa.Column("key", sa.String(128), nullable=False),
        sa.Column("started_at", sa.BigInteger(), nullable=False),
        sa.Column("weight", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_caravel_queue_starts"),
    )
    op.create_index(
        "ix_caravel_queue_starts_window", "caravel_queue_starts", ["queue", "started_at"]
    )


@before_mariadb
def downgrade() -> None:
    op.drop_index("ix_caravel_queue_starts_window", table_name="caravel_queue_starts")
    op.drop_table("caravel_queue_starts")
    op.execute("DELETE FROM caravel_queue_limits WHERE concurrency IS NULL AND per_key IS NULL")
    with op.batch_alter_table("caravel_queue_limits") as batch:
        batch.drop_constraint(_CHECK, type_="check")
        batch.drop_column("rate_period_ms")
        batch.drop_column("rate_per_key")
        batch.drop_column("rate")
        batch.create_check_constraint(_CHECK, sa.text(_OLD_RULE))
    # SQLite 3.35+ drops a column that no index or constraint names, in place.
    op.drop_column("caravel_jobs", "weight")
