"""Fair dispatch.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04

A queue's limits row gets ``fair`` (claim its ready jobs round-robin across partition keys; false
for every existing row), so a row may now hold fairness alone, and ``caravel_queue_weights``
holds a fair queue's weighted keys. ``ix_caravel_jobs_fair`` (ready jobs by queue, partition key
and claim order) lets a fair claim skip from key to key and read at most a batch of each.

The downgrade drops the weights and the index, deletes the rows that held fairness alone (those
queues run as before fairness), and drops the column: every stored fairness setting goes.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from caravel.migrations.dialects import before_mariadb
from caravel.migrations.losses import LossKind

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_CHECK = "ck_caravel_queue_limits_positive"
_CAPS = (
    "(concurrency IS NULL OR concurrency >= 1) AND (per_key IS NULL OR per_key >= 1)"
    " AND (rate IS NULL OR rate >= 1) AND (rate_per_key IS NULL OR rate_per_key >= 1)"
    " AND ((rate IS NULL AND rate_per_key IS NULL) = (rate_period_ms IS NULL))"
)
_READY = sa.text("state = 'ready'")

#: What this downgrade deletes (:mod:`caravel.migrations.losses`): each fair queue's setting
#: and its weights.
LOSSES = (
    LossKind(
        "queue_fairness",
        "fair queue setting",
        "fair queue settings",
        "deleted",
        ("caravel_queue_limits",),
        "SELECT count(*) FROM caravel_queue_limits WHERE fair",
    ),
    LossKind(
        "queue_weights",
        "queue weight",
        "queue weights",
        "deleted",
        ("caravel_queue_weights",),
        "SELECT count(*) FROM caravel_queue_weights",
    ),
)


_OLD = f"{_CAPS} AND (concurrency IS NOT NULL OR per_key IS NOT NULL OR rate_period_ms IS NOT NULL)"
_NEW = (
    f"{_CAPS} AND (concurrency IS NOT NULL OR per_key IS NOT NULL OR rate_period_ms IS NOT NULL"
    " OR fair)"
)


def _limits(*, fair: bool) -> sa.Table:
    """``caravel_queue_limits`` before (``fair=False``) or after this revision, for SQLite's
    copy of the table (which reflects no check constraint)."""
    columns: list[sa.Column[bool]] = [
        sa.Column("fair", sa.Boolean(), nullable=False, server_default=sa.false())
    ]
    return sa.Table(
        "caravel_queue_limits",
        sa.MetaData(),
        sa.Column("queue", sa.String(64), nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=True),
        sa.Column("per_key", sa.Integer(), nullable=True),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.Column("rate", sa.Integer(), nullable=True),
        sa.Column("rate_per_key", sa.Integer(), nullable=True),
        sa.Column("rate_period_ms", sa.Integer(), nullable=True),
        *(columns if fair else []),
        sa.PrimaryKeyConstraint("queue", name="pk_caravel_queue_limits"),
        sa.CheckConstraint(_NEW if fair else _OLD, name=_CHECK),
    )


@before_mariadb
def upgrade() -> None:
    with op.batch_alter_table("caravel_queue_limits", copy_from=_limits(fair=False)) as batch:
        batch.add_column(sa.Column("fair", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.drop_constraint(_CHECK, type_="check")
        batch.create_check_constraint(_CHECK, sa.text(_NEW))
    op.create_table(
        "caravel_queue_weights",
        sa.Column("queue", sa.String(64), nullable=False),
        sa.Column("key", sa.String(128), nullable=False),
        sa.Column("weight", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("queue", "key", name="pk_caravel_queue_weights"),
        sa.CheckConstraint("weight >= 1", name="ck_caravel_queue_weights_positive"),
    )
    op.create_index(
        "ix_caravel_jobs_fair",
        "caravel_jobs",
        [
            "queue",
            sa.text("coalesce(partition_key, tenant_id)"),
            sa.text("(due_at - priority * 6000)"),
        ],
        postgresql_where=_READY,
        sqlite_where=_READY,
    )


@before_mariadb
def downgrade() -> None:
    op.drop_index("ix_caravel_jobs_fair", table_name="caravel_jobs")
    op.drop_table("caravel_queue_weights")
    # A row that held fairness alone breaks the old check: the queue runs as it did before.
    op.execute(
        "DELETE FROM caravel_queue_limits"
        " WHERE concurrency IS NULL AND per_key IS NULL AND rate_period_ms IS NULL"
    )
    with op.batch_alter_table("caravel_queue_limits", copy_from=_limits(fair=True)) as batch:
        batch.drop_constraint(_CHECK, type_="check")
        batch.drop_column("fair")
        batch.create_check_constraint(_CHECK, sa.text(_OLD))
