"""Schedules.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01

``caravel_schedules`` keeps, per schedule, the latest slot a scheduler handled and whether an
operator paused it. A new table only: nothing existing is rewritten.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from caravel.migrations.dialects import before_mariadb
from caravel.migrations.losses import LossKind

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

#: What this downgrade deletes (:mod:`caravel.migrations.losses`): each schedule's row, its last
#: handled slot and its pause.
LOSSES = (
    LossKind(
        "schedules",
        "schedule record",
        "schedule records",
        "deleted",
        ("caravel_schedules",),
        "SELECT count(*) FROM caravel_schedules",
    ),
)


@before_mariadb
def upgrade() -> None:
    op.create_table(
        "caravel_schedules",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("last_slot_at", sa.BigInteger(), nullable=True),
        sa.Column("paused_at", sa.BigInteger(), nullable=True),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_caravel_schedules"),
    )


@before_mariadb
def downgrade() -> None:
    # The schedules' slots stay settled by their jobs' idempotency keys; only the saved work
    # (and the pauses) go.
    op.drop_table("caravel_schedules")
