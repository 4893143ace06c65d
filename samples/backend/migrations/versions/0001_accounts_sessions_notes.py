"""Accounts, server-side sessions and notes.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

#: MariaDB: utf8mb4 text under a binary collation, whatever the server's default (the models'
#: MARIADB_TABLE; ignored elsewhere).
_MARIADB = {"mariadb_charset": "utf8mb4", "mariadb_collate": "utf8mb4_nopad_bin"}


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("email", sa.String(254), nullable=False),
        sa.Column("password_hash", sa.String(255), nullable=False),
        sa.Column("is_operator", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_users"),
        sa.UniqueConstraint("email", name="uq_users_email"),
        **_MARIADB,
    )
    op.create_table(
        "sessions",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_sessions"),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name="fk_sessions_user_id", ondelete="CASCADE"
        ),
        **_MARIADB,
    )
    op.create_index("ix_sessions_user_id", "sessions", ["user_id"])
    op.create_table(
        "notes",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("owner_id", sa.Uuid(), nullable=False),
        sa.Column("text", sa.String(2000), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_notes"),
        sa.ForeignKeyConstraint(
            ["owner_id"], ["users.id"], name="fk_notes_owner_id", ondelete="CASCADE"
        ),
        **_MARIADB,
    )
    op.create_index("ix_notes_owner_id_created_at", "notes", ["owner_id", "created_at"])


def downgrade() -> None:
    # Each table's indexes go with it: MariaDB refuses to drop an index that a foreign key of a
    # table still there relies on.
    op.drop_table("notes")
    op.drop_table("sessions")
    op.drop_table("users")
