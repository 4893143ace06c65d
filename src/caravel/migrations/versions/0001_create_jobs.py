"""Create the jobs table.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from caravel.migrations.dialects import before_mariadb
from caravel.migrations.losses import LossKind

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

#: What this downgrade deletes (:mod:`caravel.migrations.losses`): every job left. Cancelled jobs
#: and tombstones are not counted again: 0006, which every downgrade to base passes first, takes
#: them.
LOSSES = (
    LossKind(
        "jobs",
        "job",
        "jobs",
        "deleted",
        ("caravel_jobs",),
        "SELECT count(*) FROM caravel_jobs WHERE state NOT IN ('cancelled', 'pruned')",
    ),
)


@before_mariadb
def upgrade() -> None:
    op.create_table(
        "caravel_jobs",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("queue", sa.String(64), nullable=False),
        sa.Column("job_type", sa.String(128), nullable=False),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("idempotency_key", sa.String(128), nullable=True),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("due_at", sa.BigInteger(), nullable=False),
        sa.Column("available_at", sa.BigInteger(), nullable=True),
        sa.Column("lease_token", sa.BigInteger(), nullable=False),
        sa.Column("lease_expires_at", sa.BigInteger(), nullable=True),
        sa.Column("started_at", sa.BigInteger(), nullable=True),
        sa.Column("finished_at", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.Column("last_failure", sa.String(32), nullable=True),
        sa.Column("trace_context", sa.String(512), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_caravel_jobs"),
        sa.CheckConstraint(
            "state IN ('ready', 'running', 'completed', 'dead_letter')",
            name="ck_caravel_jobs_state",
        ),
        sa.CheckConstraint(
            "attempt >= 0 AND attempt <= max_attempts", name="ck_caravel_jobs_attempt"
        ),
        sa.CheckConstraint(
            "max_attempts >= 1 AND max_attempts <= 100", name="ck_caravel_jobs_max_attempts"
        ),
        sa.UniqueConstraint(
            "queue", "tenant_id", "idempotency_key", name="uq_caravel_jobs_idempotency"
        ),
    )
    op.create_index(
        "ix_caravel_jobs_claim",
        "caravel_jobs",
        ["queue", "available_at"],
        postgresql_where=sa.text("available_at IS NOT NULL"),
        sqlite_where=sa.text("available_at IS NOT NULL"),
    )


@before_mariadb
def downgrade() -> None:
    op.drop_index("ix_caravel_jobs_claim", table_name="caravel_jobs")
    op.drop_table("caravel_jobs")
