"""Create the results table.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "results",
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("quantity", sa.Integer(), nullable=False),
        sa.Column("recorded_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("job_id"),
        # MariaDB: utf8mb4 text under a binary collation, as the queue's tables (ignored
        # elsewhere).
        mariadb_charset="utf8mb4",
        mariadb_collate="utf8mb4_nopad_bin",
    )


def downgrade() -> None:
    op.drop_table("results")
