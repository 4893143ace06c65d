"""The job's life: results, cancellation, tags, snoozes, paused queues and key tombstones.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01

Jobs gain a handler's stored ``result`` (JSON), the failed attempt's exception class
(``error_class``, never its message), ``tags``, a ``snoozes`` count and
``cancel_requested_at`` (an operator cancelled the job while it ran), two more states,
``cancelled`` and ``pruned``, and for a pruned job's tombstone ``content_hash`` (a hash of its
type and payload, which is gone) and ``pruned_at``. ``caravel_queues`` records the queues an
operator paused.

On PostgreSQL the new columns are added without rewriting the table (none has a volatile
default), and the widened state check is added ``NOT VALID`` and validated afterwards, so the
table is not locked against writes while existing rows are checked. On SQLite a check
constraint cannot be altered in place: the jobs table is copied into a new one, which reads and
writes every row once, and the finished-count triggers of 0005 are created again on it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from caravel.migrations.dialects import before_mariadb
from caravel.migrations.losses import LossKind
from caravel.migrations.sqlite_counts import CREATE_TRIGGERS, TRIGGERS

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

#: What this downgrade deletes (:mod:`caravel.migrations.losses`): cancelled jobs and key
#: tombstones have no older state to go back to, and a paused queue's pause has no table.
#: (A resumed queue's row records nothing, and goes uncounted.)
LOSSES = (
    LossKind(
        "cancelled_jobs",
        "cancelled job",
        "cancelled jobs",
        "deleted",
        ("caravel_jobs",),
        "SELECT count(*) FROM caravel_jobs WHERE state = 'cancelled'",
    ),
    LossKind(
        "key_tombstones",
        "key tombstone",
        "key tombstones",
        "deleted",
        ("caravel_jobs",),
        "SELECT count(*) FROM caravel_jobs WHERE state = 'pruned'",
    ),
    LossKind(
        "paused_queues",
        "paused queue",
        "paused queues",
        "resumed",
        ("caravel_queues",),
        "SELECT count(*) FROM caravel_queues WHERE paused_at IS NOT NULL",
    ),
)

_CHECK = "ck_caravel_jobs_state"
_STATES = "state IN ('ready', 'running', 'completed', 'dead_letter', 'cancelled', 'pruned')"
_OLD_STATES = "state IN ('ready', 'running', 'completed', 'dead_letter')"
_COLUMNS = (
    "result",
    "error_class",
    "tags",
    "snoozes",
    "cancel_requested_at",
    "content_hash",
    "pruned_at",
)


def _new_columns() -> list[sa.Column[object]]:
    return [
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("error_class", sa.String(200), nullable=True),
        sa.Column("tags", sa.String(1041), nullable=True),
        sa.Column("snoozes", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("cancel_requested_at", sa.BigInteger(), nullable=True),
        sa.Column("content_hash", sa.String(64), nullable=True),
        sa.Column("pruned_at", sa.BigInteger(), nullable=True),
    ]


@before_mariadb
def upgrade() -> None:
    op.create_table(
        "caravel_queues",
        sa.Column("queue", sa.String(64), nullable=False),
        sa.Column("paused_at", sa.BigInteger(), nullable=True),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("queue", name="pk_caravel_queues"),
    )
    if op.get_bind().dialect.name == "sqlite":
        _recreate_on_sqlite(_STATES, add=True)
        return
    for column in _new_columns():
        op.add_column("caravel_jobs", column)
    op.drop_constraint(_CHECK, "caravel_jobs", type_="check")
    op.execute(f"ALTER TABLE caravel_jobs ADD CONSTRAINT {_CHECK} CHECK ({_STATES}) NOT VALID")
    op.execute(f"ALTER TABLE caravel_jobs VALIDATE CONSTRAINT {_CHECK}")


@before_mariadb
def downgrade() -> None:
    # Cancelled jobs and tombstones have no older state to go back to; they leave with the
    # revision (and with the tombstones, the duplicate protection of their keys).
    op.execute("DELETE FROM caravel_jobs WHERE state IN ('cancelled', 'pruned')")
    if op.get_bind().dialect.name == "sqlite":
        _recreate_on_sqlite(_OLD_STATES, add=False)
    else:
        op.drop_constraint(_CHECK, "caravel_jobs", type_="check")
        op.create_check_constraint(_CHECK, "caravel_jobs", _OLD_STATES)
        for name in _COLUMNS:
            op.drop_column("caravel_jobs", name)
    op.drop_table("caravel_queues")


def _recreate_on_sqlite(states: str, *, add: bool) -> None:
    """Copy the jobs table with the new state check (and the columns added or dropped); the
    copy keeps the indexes, and the triggers are made again."""
    for trigger in TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    with op.batch_alter_table(
        "caravel_jobs",
        recreate="always",
    ) as batch:
        batch.drop_constraint(_CHECK, type_="check")
        batch.create_check_constraint(_CHECK, states)
        if add:
            for column in _new_columns():
                batch.add_column(column)
        else:
            for name in _COLUMNS:
                batch.drop_column(name)
    for statement in CREATE_TRIGGERS:
        op.execute(statement)
