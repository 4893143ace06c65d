"""Jobs indexed by creation time, so a listing reads one page instead of sorting the table.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-07

``ix_caravel_jobs_created`` (``queue``, ``created_at``, ``id``), on every database: the job
listings (the dashboard's jobs and dead-letter pages, ``caravel jobs list``,
``QueueInspector.list_jobs``) are ordered by it, newest or oldest first, and read one page of a
queue's stretch of it (their filters checked along the way) where they sorted every retained
job before: 1.3 s for a page at 1,000,000 finished jobs on PostgreSQL. A listing of every queue
finds the queues by skipping through it and merges a page of each, so a queue with few jobs
behind millions of another's reads as quickly as the busy one. Every new job adds one entry
(on PostgreSQL also each claim and acknowledgement, which write a new row version).

``ix_caravel_jobs_dead`` (``created_at``, ``id`` of dead letters only; on MariaDB, which has no
partial index, ``state``, ``created_at``, ``id``): the dead-letter listings read a page of it
instead of walking every job completed since the last dead letter. Only a job that dead-letters
gets an entry (on MariaDB, every change of state moves the job's entry).

Building it reads the jobs table once; on PostgreSQL writes to the table wait meanwhile. The
downgrade drops it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from caravel.migrations.losses import LossKind

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

#: What this downgrade deletes: nothing, an index is derived from the jobs.
LOSSES: tuple[LossKind, ...] = ()

_CREATED = "ix_caravel_jobs_created"
_DEAD = "ix_caravel_jobs_dead"


def upgrade() -> None:
    # IF NOT EXISTS: MariaDB commits DDL as it goes, so an upgrade cut off after a step but
    # before the version row moved runs it again.
    op.create_index(_CREATED, "caravel_jobs", ["queue", "created_at", "id"], if_not_exists=True)
    if op.get_bind().dialect.name == "mariadb":
        op.create_index(_DEAD, "caravel_jobs", ["state", "created_at", "id"], if_not_exists=True)
        return
    dead = sa.text("state = 'dead_letter'")
    op.create_index(
        _DEAD,
        "caravel_jobs",
        ["created_at", "id"],
        postgresql_where=dead,
        sqlite_where=dead,
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_index(_DEAD, table_name="caravel_jobs", if_exists=True)
    op.drop_index(_CREATED, table_name="caravel_jobs", if_exists=True)
