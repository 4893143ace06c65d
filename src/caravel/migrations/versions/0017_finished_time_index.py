"""Finished jobs indexed by queue, state and finish time, so the jobs a queue finished lately are
read from the index alone.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06

``ix_caravel_jobs_finished`` (finished rows: ``available_at IS NULL``; on MariaDB a plain index
whose third column is ``available_at``) gains ``finished_at`` as its last column. The queue
counts read it by queue and state as before; the autoscaling signal (``caravel metrics``) counts
a queue's jobs finished in the last minute as a range of it, instead of reading the finish time
of every retained finished job. An acknowledgement still adds one entry to it.

Rebuilding the index reads every finished row once; on PostgreSQL writes to the jobs table wait
for it. The downgrade builds the two-column index again.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from caravel.migrations.losses import LossKind

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

#: What this downgrade deletes: nothing, an index is derived from the jobs.
LOSSES: tuple[LossKind, ...] = ()

_INDEX = "ix_caravel_jobs_finished"
_FINISHED = sa.text("available_at IS NULL")


def _build(*columns: str) -> None:
    op.drop_index(_INDEX, table_name="caravel_jobs")
    if op.get_bind().dialect.name == "mariadb":
        # No partial index on MariaDB: available_at (NULL exactly for finished rows) is a column.
        op.create_index(_INDEX, "caravel_jobs", ["queue", "state", "available_at", *columns])
        return
    op.create_index(
        _INDEX,
        "caravel_jobs",
        ["queue", "state", *columns],
        postgresql_where=_FINISHED,
        sqlite_where=_FINISHED,
    )


def upgrade() -> None:
    _build("finished_at")


def downgrade() -> None:
    _build()
