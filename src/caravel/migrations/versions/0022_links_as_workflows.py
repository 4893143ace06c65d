"""Chains and batches become workflows: one release path.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-07

From here a chain, and a batch with a callback, are inserted as the workflow each one is
(:mod:`caravel.store.links.graph`) and released by the workflow triggers of ``0021``. The upgrade
replaces the triggers of ``0009`` (MariaDB: ``0016``'s ``caravel_jobs_release``) with ones that
release nothing (:mod:`caravel.migrations.release_triggers`, ``LINKS_*``): a cancelled chain step
still cancels its held rest, and a batch's row still counts its members' finishes, for
``get_batch``. The chains and batches in flight (a chain with a held step, a batch whose callback
is held) become workflows in place: a workflow row (the chain's or batch's id), a step row per
job (``waiting`` what it still waits for), an edge per link (satisfied when the job after it was
released), and ``workflow_id`` on their jobs; so they finish as they would have.

The downgrade reverses that: it deletes the chains' and batches' workflow rows, steps and edges,
clears their jobs' ``workflow_id`` and puts the old triggers back, which find every link and
count they need (the columns stayed). Nothing is lost.
"""

from __future__ import annotations

import importlib

import sqlalchemy as sa
from alembic import op

from caravel.clock import SystemClock
from caravel.limits import HELD_DUE_AT
from caravel.migrations import release_triggers
from caravel.migrations.losses import LossKind
from caravel.migrations.workflow_triggers import mariadb, postgresql, sqlite

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

LOSSES: tuple[LossKind, ...] = ()

_HELD = f"state = 'ready' AND due_at = {HELD_DUE_AT}"
_ENDED = "('completed', 'dead_letter', 'cancelled', 'pruned')"
#: A content hash for the converted workflows (chains and batches are keyed by their jobs).
_NO_HASH = "0" * 64
_TEXT = {"postgresql": "VARCHAR", "sqlite": "TEXT", "mariadb": "CHAR"}

#: Chains with a held step, not converted yet (MariaDB may run this again after a cut-off).
_CHAINS = (
    f"SELECT c.chain_id FROM caravel_jobs AS c WHERE c.{_HELD.replace(' AND ', ' AND c.')}"
    " AND c.chain_id IS NOT NULL AND c.workflow_id IS NULL"
)
#: Batches whose callback is held, not converted yet.
_BATCHES = (
    "SELECT b.id FROM caravel_batches AS b JOIN caravel_jobs AS c ON c.id = b.callback_id"
    f" WHERE c.{_HELD.replace(' AND ', ' AND c.')} AND c.workflow_id IS NULL"
)
_STEP_COLUMNS = (
    "job_id, workflow_id, step, step_index, waiting, on_failure, wait_signal,"
    " signal_received_at, delay_ms, timeout_ms, released_at"
)
_EDGE_COLUMNS = "parent_id, child_id, workflow_id, runs_after_failure, hands_result, satisfied"
_WORKFLOW_COLUMNS = (
    "id, tenant_id, name, idempotency_key, content_hash, total, created_at, cancelled_at,"
    " updated_at, pruned_at"
)


def _held(alias: str) -> str:
    return f"({alias}.state = 'ready' AND {alias}.due_at = {HELD_DUE_AT})"


def _conversion(text: str) -> tuple[str, ...]:
    """The statements that make the chains and batches in flight workflows (``text`` the
    dialect's name for a string type in a CAST)."""
    return (
        # Chains: the workflow, a step per job (named by position), an edge per link.
        f"INSERT INTO caravel_workflows ({_WORKFLOW_COLUMNS})"
        f" SELECT j.chain_id, MIN(j.tenant_id), 'chain', NULL, '{_NO_HASH}', COUNT(*),"
        " MIN(j.created_at), NULL, :now, NULL FROM caravel_jobs AS j"
        f" WHERE j.chain_id IN ({_CHAINS}) GROUP BY j.chain_id",
        f"INSERT INTO caravel_workflow_steps ({_STEP_COLUMNS})"
        f" SELECT j.id, j.chain_id, CAST(j.chain_step AS {text}), NULL,"
        f" CASE WHEN {_held('j')} THEN 1 ELSE 0 END, 'stop', NULL, NULL, NULL, NULL,"
        f" CASE WHEN {_held('j')} THEN NULL ELSE j.updated_at END"
        f" FROM caravel_jobs AS j WHERE j.chain_id IN ({_CHAINS})",
        f"INSERT INTO caravel_workflow_edges ({_EDGE_COLUMNS})"
        f" SELECT j.id, j.chain_next, j.chain_id, FALSE, TRUE, NOT {_held('n')}"
        " FROM caravel_jobs AS j JOIN caravel_jobs AS n ON n.id = j.chain_next"
        f" WHERE j.chain_id IN ({_CHAINS})",
        # Batches: the workflow, the members (a group), the callback after every member.
        f"INSERT INTO caravel_workflows ({_WORKFLOW_COLUMNS})"
        f" SELECT b.id, b.tenant_id, 'batch', NULL, '{_NO_HASH}', b.total + 1, b.created_at,"
        f" NULL, :now, NULL FROM caravel_batches AS b WHERE b.id IN ({_BATCHES})",
        f"INSERT INTO caravel_workflow_steps ({_STEP_COLUMNS})"
        " SELECT m.id, m.batch_id, 'member',"
        " ROW_NUMBER() OVER (PARTITION BY m.batch_id ORDER BY m.created_at, m.id) - 1,"
        " 0, 'stop', NULL, NULL, NULL, NULL, m.created_at"
        f" FROM caravel_jobs AS m WHERE m.batch_id IN ({_BATCHES})",
        f"INSERT INTO caravel_workflow_edges ({_EDGE_COLUMNS})"
        f" SELECT m.id, b.callback_id, b.id, TRUE, FALSE, m.state IN {_ENDED}"
        " FROM caravel_jobs AS m JOIN caravel_batches AS b ON b.id = m.batch_id"
        f" WHERE b.id IN ({_BATCHES})",
        f"INSERT INTO caravel_workflow_steps ({_STEP_COLUMNS})"
        " SELECT b.callback_id, b.id, 'callback', NULL,"
        " (SELECT COUNT(*) FROM caravel_jobs AS m"
        f" WHERE m.batch_id = b.id AND m.state NOT IN {_ENDED}),"
        " 'continue', NULL, NULL, NULL, NULL, NULL"
        f" FROM caravel_batches AS b WHERE b.id IN ({_BATCHES})",
        # Last, as the selections above test it: the jobs join their workflows.
        "UPDATE caravel_jobs SET workflow_id = (SELECT s.workflow_id"
        " FROM caravel_workflow_steps AS s WHERE s.job_id = caravel_jobs.id)"
        " WHERE workflow_id IS NULL AND id IN (SELECT s.job_id FROM caravel_workflow_steps AS s)",
    )


#: The chains' and batches' workflows (a chain's id is its first step's, a batch's its own).
_LINKED = (
    "(SELECT b.id FROM caravel_batches AS b"
    " UNION SELECT j.chain_id FROM caravel_jobs AS j WHERE j.chain_id IS NOT NULL)"
)
_UNCONVERSION = (
    f"DELETE FROM caravel_workflow_edges WHERE workflow_id IN {_LINKED}",
    f"DELETE FROM caravel_workflow_steps WHERE workflow_id IN {_LINKED}",
    f"DELETE FROM caravel_workflow_signals WHERE workflow_id IN {_LINKED}",
    "UPDATE caravel_jobs SET workflow_id = NULL WHERE workflow_id IN"
    " (SELECT w.id FROM caravel_workflows AS w WHERE w.name IN ('chain', 'batch'))"
    " AND (chain_id = workflow_id OR batch_id = workflow_id"
    " OR workflow_id IN (SELECT b.id FROM caravel_batches AS b))",
    f"DELETE FROM caravel_workflows WHERE id IN {_LINKED}",
)


def _mariadb_0016_trigger() -> str:
    """``0016``'s release trigger, as that revision created it."""
    module = importlib.import_module("caravel.migrations.versions.0016_mariadb")
    return str(next(s for s in module.CREATE if s.startswith("CREATE TRIGGER")))


def _dialect() -> str:
    return str(op.get_bind().dialect.name)


def upgrade() -> None:
    dialect = _dialect()
    old: tuple[str, ...]
    new: tuple[str, ...]
    flows: tuple[str, ...]  # the workflow release as it is now, recreated
    if dialect == "postgresql":
        old, new = release_triggers.POSTGRESQL_DROP, release_triggers.LINKS_POSTGRESQL_CREATE
        flows = (*postgresql.DROP, *postgresql.CREATE)
    elif dialect == "sqlite":
        old, new = release_triggers.SQLITE_DROP, release_triggers.LINKS_SQLITE_CREATE
        flows = (*sqlite.DROP, *sqlite.CREATE)
    else:
        old, new = release_triggers.LINKS_MARIADB_DROP, release_triggers.LINKS_MARIADB_CREATE
        flows = (*mariadb.DROP, *mariadb.CREATE)
    for statement in old:
        op.execute(statement)
    now = SystemClock().now_ms()
    for statement in _conversion(_TEXT[dialect]):
        op.execute(sa.text(statement).bindparams(now=now) if ":now" in statement else statement)
    for statement in (*new, *flows):
        op.execute(statement)


def downgrade() -> None:
    dialect = _dialect()
    new: tuple[str, ...]
    old: tuple[str, ...]
    if dialect == "postgresql":
        new, old = release_triggers.LINKS_POSTGRESQL_DROP, release_triggers.POSTGRESQL_CREATE
    elif dialect == "sqlite":
        new, old = release_triggers.LINKS_SQLITE_DROP, release_triggers.SQLITE_CREATE
    else:
        new, old = release_triggers.LINKS_MARIADB_DROP, (_mariadb_0016_trigger(),)
    for statement in (*new, *_UNCONVERSION, *old):
        op.execute(statement)
