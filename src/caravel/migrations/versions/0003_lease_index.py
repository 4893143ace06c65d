"""Index the leases of running jobs, so a worker finds expired ones without reading the backlog.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30

Workers claim waiting jobs and jobs whose lease expired (a crashed worker's) separately: a
recovered job is claimed on its own, never in a batch, so a job that kills its worker cannot
take the jobs claimed beside it down again on every retry. Looking for expired leases then
needs its own small index: only running jobs, ordered by lease expiry.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from caravel.migrations.dialects import before_mariadb
from caravel.migrations.losses import LossKind

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

#: What this downgrade deletes or strands (:mod:`caravel.migrations.losses`): nothing, only an
#: index goes.
LOSSES: tuple[LossKind, ...] = ()

_RUNNING = sa.text("state = 'running'")


@before_mariadb
def upgrade() -> None:
    op.create_index(
        "ix_caravel_jobs_leases",
        "caravel_jobs",
        ["queue", "available_at"],
        postgresql_where=_RUNNING,
        sqlite_where=_RUNNING,
    )


@before_mariadb
def downgrade() -> None:
    op.drop_index("ix_caravel_jobs_leases", table_name="caravel_jobs")
