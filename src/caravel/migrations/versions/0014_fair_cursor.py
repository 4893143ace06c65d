"""The fair dispatch cursor.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06

A fair queue's limits row gets ``fair_cursor``: the partition key its last claim served last.
The next claim's round starts with the keys after it (in key order, then from the first key
again), so claims of one job at a time go round the keys too, instead of always taking the
oldest job of a round. Existing rows start with no cursor (the first key first).

The downgrade drops the column; nothing a user set goes with it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from caravel.migrations.dialects import before_mariadb
from caravel.migrations.losses import LossKind

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

#: A cursor is where the next round starts, not a setting: the downgrade loses nothing.
LOSSES: tuple[LossKind, ...] = ()


@before_mariadb
def upgrade() -> None:
    op.add_column("caravel_queue_limits", sa.Column("fair_cursor", sa.String(128), nullable=True))


@before_mariadb
def downgrade() -> None:
    # Not in the check constraint nor in an index: SQLite drops it in place too.
    op.drop_column("caravel_queue_limits", "fair_cursor")
