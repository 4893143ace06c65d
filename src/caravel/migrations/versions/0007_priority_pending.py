"""Priorities and "one pending per key".

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01

Jobs gain a ``priority`` (-100 to 100, 0 for every existing job) and a ``pending_key``. Ready
jobs are claimed in order of their due time moved earlier by six seconds per point of priority,
kept by the expression index ``ix_caravel_jobs_ranked`` over ready rows only. At most one ready
job per queue, tenant and pending key exists, settled by the partial unique index
``uq_caravel_jobs_pending``.

Both columns are added without rewriting the table: the default is a constant, and the range
check is added ``NOT VALID`` on PostgreSQL and validated afterwards (on SQLite it is part of the
added column). The new indexes read only ready rows when they are built.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from caravel.migrations.dialects import before_mariadb
from caravel.migrations.losses import LossKind
from caravel.migrations.sqlite_counts import CREATE_TRIGGERS, TRIGGERS

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

#: What this downgrade deletes or strands (:mod:`caravel.migrations.losses`): no row; columns go
#: (priorities and pending keys, see docs/guides/migrations.md).
LOSSES: tuple[LossKind, ...] = ()

_CHECK = "ck_caravel_jobs_priority"
_RANGE = "priority >= -100 AND priority <= 100"
_READY = sa.text("state = 'ready'")
_PENDING = sa.text("pending_key IS NOT NULL AND state = 'ready'")


@before_mariadb
def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        # SQLite can add a column with its own check, but not a table constraint.
        op.execute(
            "ALTER TABLE caravel_jobs ADD COLUMN priority SMALLINT DEFAULT 0 NOT NULL "
            f"CONSTRAINT {_CHECK} CHECK ({_RANGE})"
        )
    else:
        op.add_column(
            "caravel_jobs",
            sa.Column("priority", sa.SmallInteger(), nullable=False, server_default=sa.text("0")),
        )
        op.execute(f"ALTER TABLE caravel_jobs ADD CONSTRAINT {_CHECK} CHECK ({_RANGE}) NOT VALID")
        op.execute(f"ALTER TABLE caravel_jobs VALIDATE CONSTRAINT {_CHECK}")
    op.add_column("caravel_jobs", sa.Column("pending_key", sa.String(128), nullable=True))
    op.create_index(
        "ix_caravel_jobs_ranked",
        "caravel_jobs",
        ["queue", sa.text("(due_at - priority * 6000)")],
        postgresql_where=_READY,
        sqlite_where=_READY,
    )
    op.create_index(
        "uq_caravel_jobs_pending",
        "caravel_jobs",
        ["queue", "tenant_id", "pending_key"],
        unique=True,
        postgresql_where=_PENDING,
        sqlite_where=_PENDING,
    )


@before_mariadb
def downgrade() -> None:
    op.drop_index("uq_caravel_jobs_pending", table_name="caravel_jobs")
    op.drop_index("ix_caravel_jobs_ranked", table_name="caravel_jobs")
    if op.get_bind().dialect.name == "sqlite":
        # DROP COLUMN refuses a column with a check; both go with a copy of the table, which
        # takes the finished-count triggers with it, so they are made again.
        for trigger in TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
        with op.batch_alter_table("caravel_jobs", recreate="always") as batch:
            batch.drop_constraint(_CHECK, type_="check")
            batch.drop_column("pending_key")
            batch.drop_column("priority")
        for statement in CREATE_TRIGGERS:
            op.execute(statement)
        return
    op.drop_column("caravel_jobs", "pending_key")
    op.drop_column("caravel_jobs", "priority")
