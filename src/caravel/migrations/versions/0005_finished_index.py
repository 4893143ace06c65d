"""Index finished jobs by queue and state, so queue counts never read the retained history.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

Queue counts (``caravel status``, the dashboard's overview, the queue gauges) counted every row of
the jobs table, so their cost grew with the completed and dead-lettered history a queue retains.
Live jobs are now counted from the claim index's rows, and finished ones from this partial index,
exactly up to a limit per queue and state; past it PostgreSQL answers from planner statistics.
The extended statistics on (queue, state) let those estimates see how each queue's rows split
between the states instead of assuming every queue splits like the whole table.

Building the index reads every finished row once; on PostgreSQL writes to the jobs table wait
while it is built, inside the migration's transaction. On a large table build it beforehand with
``CREATE INDEX CONCURRENTLY`` under the same name and definition; this migration then finds it
and leaves it.

Each acknowledgement adds one entry to this index (the row becomes finished).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_INDEX = "ix_caravel_jobs_finished"
_STATISTICS = "caravel_jobs_queue_state"
_FINISHED = sa.text("available_at IS NULL")


def upgrade() -> None:
    op.create_index(
        _INDEX,
        "caravel_jobs",
        ["queue", "state"],
        postgresql_where=_FINISHED,
        sqlite_where=_FINISHED,
        if_not_exists=True,
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            f"CREATE STATISTICS IF NOT EXISTS {_STATISTICS} (mcv) ON queue, state FROM caravel_jobs"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP STATISTICS IF EXISTS {_STATISTICS}")
    op.drop_index(_INDEX, table_name="caravel_jobs")
