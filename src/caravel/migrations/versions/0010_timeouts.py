"""Per-job execution timeouts.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03

Jobs gain ``timeout_ms``: the execution timeout a dispatch gave the job
(``DispatchOptions(timeout=...)``) in milliseconds, NULL for every existing job and for jobs
that take their type's timeout (``register(timeout=...)``, which is code, not stored). Adding a
nullable column without a default rewrites no row.

The downgrade drops the column: jobs that had a timeout of their own take their type's again.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from caravel.migrations.dialects import before_mariadb
from caravel.migrations.losses import LossKind

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

#: What this downgrade deletes or strands (:mod:`caravel.migrations.losses`): no row; a column
#: goes (per-dispatch timeouts, see docs/guides/migrations.md).
LOSSES: tuple[LossKind, ...] = ()


@before_mariadb
def upgrade() -> None:
    op.add_column("caravel_jobs", sa.Column("timeout_ms", sa.Integer(), nullable=True))


@before_mariadb
def downgrade() -> None:
    op.drop_column("caravel_jobs", "timeout_ms")
