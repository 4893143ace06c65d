"""Keep only jobs that have an idempotency key in the idempotency index.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30

The unique constraint over (queue, tenant_id, idempotency_key) held an entry for every job, keyed
or not, although a job without a key can never collide (NULLs are distinct in a unique index on
both databases). On PostgreSQL a claim or an acknowledgement writes a new row version whose
entries go into every index of the table, so each keyless job paid for entries in this index
twice more in its life, and with a large retained history the index is deep. The constraint is
replaced by a unique index over the keyed rows only: which submissions collide is unchanged.

PostgreSQL builds the new index before it drops the constraint, in the migration's transaction,
so uniqueness holds throughout; writes to the jobs table wait while the index is built (it reads
every row, but holds only the keyed ones). SQLite cannot drop a table's own constraint in place,
so its table is copied into a new one without it (Alembic's batch mode), indexes included.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from caravel.migrations.dialects import before_mariadb
from caravel.migrations.losses import LossKind

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

#: What this downgrade deletes or strands (:mod:`caravel.migrations.losses`): nothing, the
#: constraint it restores accepts every row the index accepted.
LOSSES: tuple[LossKind, ...] = ()

_NAME = "uq_caravel_jobs_idempotency"
_COLUMNS = ["queue", "tenant_id", "idempotency_key"]
_KEYED = sa.text("idempotency_key IS NOT NULL")


def _create_keyed_index(name: str) -> None:
    op.create_index(
        name, "caravel_jobs", _COLUMNS, unique=True, postgresql_where=_KEYED, sqlite_where=_KEYED
    )


@before_mariadb
def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        with op.batch_alter_table("caravel_jobs", recreate="always") as batch:
            batch.drop_constraint(_NAME, type_="unique")
        _create_keyed_index(_NAME)
        return
    _create_keyed_index(f"{_NAME}_keyed")
    op.drop_constraint(_NAME, "caravel_jobs", type_="unique")
    op.execute(f"ALTER INDEX {_NAME}_keyed RENAME TO {_NAME}")


@before_mariadb
def downgrade() -> None:
    op.drop_index(_NAME, table_name="caravel_jobs")
    if op.get_bind().dialect.name == "sqlite":
        with op.batch_alter_table("caravel_jobs", recreate="always") as batch:
            batch.create_unique_constraint(_NAME, _COLUMNS)
        return
    op.create_unique_constraint(_NAME, "caravel_jobs", _COLUMNS)
