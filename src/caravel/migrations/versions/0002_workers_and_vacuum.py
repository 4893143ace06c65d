"""Add the worker registry; tune autovacuum for the jobs table on PostgreSQL.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

The jobs table is updated several times per job (claim, acknowledge), so dead row versions pile
up quickly, and the claim index only stays small if they are cleaned promptly. On PostgreSQL the
table gets its own autovacuum settings: vacuum after 1% of rows changed (instead of 20%) and
analyze after 2%, without the cost-based throttling delay. SQLite needs nothing: WAL checkpoints
reuse pages without a vacuum.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from caravel.migrations.dialects import before_mariadb
from caravel.migrations.losses import LossKind

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

#: What this downgrade deletes (:mod:`caravel.migrations.losses`): the worker registry's rows.
LOSSES = (
    LossKind(
        "workers",
        "worker record",
        "worker records",
        "deleted",
        ("caravel_workers",),
        "SELECT count(*) FROM caravel_workers",
    ),
)

_VACUUM = (
    "autovacuum_vacuum_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.02, "
    "autovacuum_vacuum_cost_delay = 0"
)


@before_mariadb
def upgrade() -> None:
    op.create_table(
        "caravel_workers",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("queues", sa.String(1024), nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.BigInteger(), nullable=False),
        sa.Column("heartbeat_at", sa.BigInteger(), nullable=False),
        sa.Column("in_flight", sa.Integer(), nullable=False),
        sa.Column("stopped_at", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_caravel_workers"),
    )
    op.create_index("ix_caravel_workers_heartbeat", "caravel_workers", ["heartbeat_at"])
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"ALTER TABLE caravel_jobs SET ({_VACUUM})")


@before_mariadb
def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "ALTER TABLE caravel_jobs RESET (autovacuum_vacuum_scale_factor, "
            "autovacuum_analyze_scale_factor, autovacuum_vacuum_cost_delay)"
        )
    op.drop_index("ix_caravel_workers_heartbeat", table_name="caravel_workers")
    op.drop_table("caravel_workers")
