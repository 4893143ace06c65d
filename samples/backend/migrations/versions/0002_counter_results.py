"""Counter results: one row per queue job, the report's data and the processing receipt.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

Rolling back refuses to drop a table that holds results: those rows are what stop a redelivered
job from counting twice, so losing them has to be a deliberate, separate decision.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

#: MariaDB: utf8mb4 text under a binary collation, whatever the server's default (the models'
#: MARIADB_TABLE; ignored elsewhere).
_MARIADB = {"mariadb_charset": "utf8mb4", "mariadb_collate": "utf8mb4_nopad_bin"}


def upgrade() -> None:
    op.create_table(
        "counter_results",
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("owner_id", sa.String(128), nullable=False),
        sa.Column("quantity", sa.Integer(), nullable=False),
        sa.Column("recorded_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("job_id", name="pk_counter_results"),
        sa.CheckConstraint(
            "quantity >= 1 AND quantity <= 1000", name="ck_counter_results_quantity"
        ),
        **_MARIADB,
    )
    op.create_index(
        "ix_counter_results_owner_recorded",
        "counter_results",
        ["owner_id", "recorded_at", "job_id"],
    )


def downgrade() -> None:
    count = op.get_bind().execute(sa.text("SELECT COUNT(*) FROM counter_results")).scalar_one()
    if count:
        raise RuntimeError(
            f"counter_results holds {count} result rows; refusing to drop them. Those rows "
            "keep redelivered jobs from counting twice: export or delete them deliberately first"
        )
    op.drop_index("ix_counter_results_owner_recorded", table_name="counter_results")
    op.drop_table("counter_results")
