"""Create the signups table.

Revision ID: 0001
Revises:
Create Date: 2026-12-01
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
        "signups",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("email", sa.String(254), nullable=False),
        sa.Column("welcome_job_id", sa.Uuid(), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("welcomed_at_ms", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("email"),
        # MariaDB: utf8mb4 text under a binary collation, as the queue's tables (ignored
        # elsewhere).
        mariadb_charset="utf8mb4",
        mariadb_collate="utf8mb4_nopad_bin",
    )


def downgrade() -> None:
    op.drop_table("signups")
