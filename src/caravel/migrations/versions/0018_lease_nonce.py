"""Lease nonces: a random number each claim draws, presented with the lease token by every write
under the lease.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-07

``caravel_jobs`` gains ``lease_nonce`` (``BIGINT``, ``NULL`` until a job's next claim; see
:mod:`caravel.store.claims.nonces`). With asynchronous replication a claim lost with the primary
leaves the promoted standby to hand out the same lease token again; the nonce, drawn anew by
every claim, tells the two leases apart, so the lost claim's holder is fenced off.

Adding a nullable column without a default rewrites nothing (PostgreSQL and SQLite change the
table's definition only, MariaDB adds it instantly). A job running when this revision is applied
has no nonce: its holder, a worker of the previous release, does not present one. Downgrading
drops the column; no row is lost.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from caravel.migrations.losses import LossKind

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

#: What this downgrade deletes: nothing, the nonces of running leases only.
LOSSES: tuple[LossKind, ...] = ()


def upgrade() -> None:
    if op.get_bind().dialect.name == "mariadb":
        # MariaDB commits DDL as it goes: a rerun after a failed upgrade finds the column there.
        op.execute("ALTER TABLE caravel_jobs ADD COLUMN IF NOT EXISTS lease_nonce BIGINT NULL")
        return
    op.add_column("caravel_jobs", sa.Column("lease_nonce", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    if op.get_bind().dialect.name == "mariadb":
        op.execute("ALTER TABLE caravel_jobs DROP COLUMN IF EXISTS lease_nonce")
        return
    # In no constraint or index: SQLite drops it in place too.
    op.drop_column("caravel_jobs", "lease_nonce")
