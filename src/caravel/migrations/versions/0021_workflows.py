"""Workflows: graphs of jobs where each step runs once its dependencies have finished.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-07

``caravel_jobs`` gains ``workflow_id`` (NULL for every other job, so no row is rewritten) and
``ix_caravel_jobs_workflow`` over the workflow jobs only (MariaDB, without partial indexes,
indexes every row). New tables: ``caravel_workflows`` (one row per workflow; its idempotency key
is unique per tenant), ``caravel_workflow_steps`` (what each step still waits for),
``caravel_workflow_edges`` (its dependencies) and ``caravel_workflow_signals``. The release
triggers of :mod:`caravel.migrations.workflow_triggers` release a held step in the statement that
finishes its last dependency; on MariaDB the store makes the release its trigger queues.

The downgrade drops the triggers, so a step still held would wait forever: it dead-letters each
held workflow step instead (``last_failure`` ``ReleaseLost``), as ``0009`` does for chains, and
deletes the workflow tables; the steps' jobs stay, as plain jobs.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from caravel.clock import SystemClock
from caravel.limits import HELD_DUE_AT
from caravel.migrations.losses import LossKind
from caravel.migrations.workflow_triggers import mariadb, postgresql, sqlite

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

_HELD = f"state = 'ready' AND due_at = {HELD_DUE_AT} AND workflow_id IS NOT NULL"

#: A chain's or a batch's workflow (from 0022, whose downgrade runs before this one and gives
#: them back as plain chains and batches, nothing lost) is not counted here: the counts of a
#: downgrade are all taken before its first step.
_OWN = (
    "{0} NOT IN (SELECT b.id FROM caravel_batches AS b)"
    " AND {0} NOT IN (SELECT c.chain_id FROM caravel_jobs AS c WHERE c.chain_id IS NOT NULL)"
)

#: What this downgrade takes: the held steps it dead-letters, the workflows' rows and their
#: signals (the steps' and edges' rows go with them, counted as their workflows).
LOSSES = (
    LossKind(
        "held_workflow_steps",
        "held workflow step",
        "held workflow steps",
        "dead_lettered",
        ("caravel_jobs",),
        f"SELECT count(*) FROM caravel_jobs WHERE {_HELD} AND chain_id IS NULL"
        f" AND {_OWN.format('workflow_id')}",
    ),
    LossKind(
        "workflows",
        "workflow record",
        "workflow records",
        "deleted",
        ("caravel_workflows",),
        f"SELECT count(*) FROM caravel_workflows WHERE {_OWN.format('id')}",
    ),
    LossKind(
        "workflow_signals",
        "workflow signal",
        "workflow signals",
        "deleted",
        ("caravel_workflow_signals",),
        f"SELECT count(*) FROM caravel_workflow_signals WHERE {_OWN.format('workflow_id')}",
    ),
)

_MARIADB_TABLE = " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin"

#: MariaDB commits DDL as it goes: each statement is safe to run again after a cut-off upgrade.
_MARIADB_CREATE = (
    "ALTER TABLE caravel_jobs ADD COLUMN IF NOT EXISTS workflow_id UUID NULL",
    "CREATE INDEX IF NOT EXISTS ix_caravel_jobs_workflow ON caravel_jobs (workflow_id, state)",
    "CREATE TABLE IF NOT EXISTS caravel_workflows ("
    " id UUID NOT NULL,"
    " tenant_id VARCHAR(128) NOT NULL,"
    " name VARCHAR(128) NULL,"
    " idempotency_key VARCHAR(128) NULL,"
    " content_hash VARCHAR(64) NOT NULL,"
    " total INT NOT NULL,"
    " created_at BIGINT NOT NULL,"
    " cancelled_at BIGINT NULL,"
    " updated_at BIGINT NOT NULL,"
    " pruned_at BIGINT NULL,"
    " CONSTRAINT pk_caravel_workflows PRIMARY KEY (id),"
    " UNIQUE INDEX uq_caravel_workflows_idempotency (tenant_id, idempotency_key),"
    " INDEX ix_caravel_workflows_created (created_at)"
    ")" + _MARIADB_TABLE,
    "CREATE TABLE IF NOT EXISTS caravel_workflow_steps ("
    " job_id UUID NOT NULL,"
    " workflow_id UUID NOT NULL,"
    " step VARCHAR(128) NOT NULL,"
    " step_index INT NULL,"
    " waiting INT NOT NULL,"
    " on_failure VARCHAR(8) NOT NULL,"
    " wait_signal VARCHAR(128) NULL,"
    " signal_received_at BIGINT NULL,"
    " delay_ms BIGINT NULL,"
    " timeout_ms BIGINT NULL,"
    " released_at BIGINT NULL,"
    " CONSTRAINT pk_caravel_workflow_steps PRIMARY KEY (job_id),"
    " INDEX ix_caravel_workflow_steps_step (workflow_id, step, step_index)"
    ")" + _MARIADB_TABLE,
    "CREATE TABLE IF NOT EXISTS caravel_workflow_edges ("
    " parent_id UUID NOT NULL,"
    " child_id UUID NOT NULL,"
    " workflow_id UUID NOT NULL,"
    " runs_after_failure BOOLEAN NOT NULL,"
    " hands_result BOOLEAN NOT NULL,"
    " satisfied BOOLEAN NOT NULL DEFAULT 0,"
    " CONSTRAINT pk_caravel_workflow_edges PRIMARY KEY (parent_id, child_id),"
    " INDEX ix_caravel_workflow_edges_child (child_id)"
    ")" + _MARIADB_TABLE,
    "CREATE TABLE IF NOT EXISTS caravel_workflow_signals ("
    " workflow_id UUID NOT NULL,"
    " name VARCHAR(128) NOT NULL,"
    " payload MEDIUMTEXT NOT NULL,"
    " received_at BIGINT NOT NULL,"
    " CONSTRAINT pk_caravel_workflow_signals PRIMARY KEY (workflow_id, name)"
    ")" + _MARIADB_TABLE,
    *mariadb.CREATE,
)

_TABLES = (
    "caravel_workflow_signals",
    "caravel_workflow_edges",
    "caravel_workflow_steps",
    "caravel_workflows",
)


def _dialect() -> str:
    return str(op.get_bind().dialect.name)


def upgrade() -> None:
    dialect = _dialect()
    if dialect == "mariadb":
        for statement in _MARIADB_CREATE:
            op.execute(statement)
        return
    op.add_column("caravel_jobs", sa.Column("workflow_id", sa.Uuid(), nullable=True))
    where = sa.text("workflow_id IS NOT NULL")
    op.create_index(
        "ix_caravel_jobs_workflow",
        "caravel_jobs",
        ["workflow_id", "state"],
        postgresql_where=where,
        sqlite_where=where,
    )
    op.create_table(
        "caravel_workflows",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("name", sa.String(128), nullable=True),
        sa.Column("idempotency_key", sa.String(128), nullable=True),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("cancelled_at", sa.BigInteger(), nullable=True),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.Column("pruned_at", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_caravel_workflows"),
    )
    op.create_index("ix_caravel_workflows_created", "caravel_workflows", ["created_at"])
    keyed = sa.text("idempotency_key IS NOT NULL")
    op.create_index(
        "uq_caravel_workflows_idempotency",
        "caravel_workflows",
        ["tenant_id", "idempotency_key"],
        unique=True,
        postgresql_where=keyed,
        sqlite_where=keyed,
    )
    op.create_table(
        "caravel_workflow_steps",
        sa.Column("job_id", sa.Uuid(), nullable=False),
        sa.Column("workflow_id", sa.Uuid(), nullable=False),
        sa.Column("step", sa.String(128), nullable=False),
        sa.Column("step_index", sa.Integer(), nullable=True),
        sa.Column("waiting", sa.Integer(), nullable=False),
        sa.Column("on_failure", sa.String(8), nullable=False),
        sa.Column("wait_signal", sa.String(128), nullable=True),
        sa.Column("signal_received_at", sa.BigInteger(), nullable=True),
        sa.Column("delay_ms", sa.BigInteger(), nullable=True),
        sa.Column("timeout_ms", sa.BigInteger(), nullable=True),
        sa.Column("released_at", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("job_id", name="pk_caravel_workflow_steps"),
    )
    op.create_index(
        "ix_caravel_workflow_steps_step",
        "caravel_workflow_steps",
        ["workflow_id", "step", "step_index"],
    )
    op.create_table(
        "caravel_workflow_edges",
        sa.Column("parent_id", sa.Uuid(), nullable=False),
        sa.Column("child_id", sa.Uuid(), nullable=False),
        sa.Column("workflow_id", sa.Uuid(), nullable=False),
        sa.Column("runs_after_failure", sa.Boolean(), nullable=False),
        sa.Column("hands_result", sa.Boolean(), nullable=False),
        sa.Column("satisfied", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.PrimaryKeyConstraint("parent_id", "child_id", name="pk_caravel_workflow_edges"),
    )
    op.create_index("ix_caravel_workflow_edges_child", "caravel_workflow_edges", ["child_id"])
    op.create_table(
        "caravel_workflow_signals",
        sa.Column("workflow_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("received_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("workflow_id", "name", name="pk_caravel_workflow_signals"),
    )
    for statement in postgresql.CREATE if dialect == "postgresql" else sqlite.CREATE:
        op.execute(statement)


def downgrade() -> None:
    dialect = _dialect()
    drop = {"postgresql": postgresql.DROP, "sqlite": sqlite.DROP, "mariadb": mariadb.DROP}
    for statement in drop[dialect]:
        op.execute(statement)
    # After the triggers went, so dead-lettering a held step releases nothing.
    now = SystemClock().now_ms()
    op.execute(
        sa.text(
            "UPDATE caravel_jobs SET state = 'dead_letter', due_at = :now, available_at = NULL,"
            " lease_expires_at = NULL, finished_at = :now, updated_at = :now,"
            f" last_failure = :why WHERE {_HELD}"
        ).bindparams(now=now, why="ReleaseLost")
    )
    if dialect == "mariadb":
        for table in _TABLES:
            op.execute(f"DROP TABLE IF EXISTS {table}")
        op.execute("DROP INDEX IF EXISTS ix_caravel_jobs_workflow ON caravel_jobs")
        op.execute("ALTER TABLE caravel_jobs DROP COLUMN IF EXISTS workflow_id")
        return
    for table in _TABLES:
        op.drop_table(table)
    op.drop_index("ix_caravel_jobs_workflow", table_name="caravel_jobs")
    # In no other index or constraint: SQLite drops it in place too.
    op.drop_column("caravel_jobs", "workflow_id")
