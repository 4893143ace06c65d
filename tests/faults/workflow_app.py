"""The worker app of the workflow fault test (``caravel worker --app
tests.faults.workflow_app:registry``), and the tables it and the checker use in the queue's own
database.

Every step of every workflow is one :class:`WfStep` job; its ``role`` steers the handler:

* ``work``: sleep a little and return ``{"step": <step>, "i": <index>}`` (its result).
* ``fan_in``: read every result of the group ``group`` through the paged reader
  (``ctx.workflow.results``) and note what it saw: how many, whether the indexes were exactly
  ``0..expect-1`` and every result the member's own, every state completed.
* ``join``: read the single results of the steps ``reads`` names (``ctx.workflow.result``).
* ``fail``: raise, every attempt (its type allows two attempts, a short backoff apart).
* ``continue``: note which dependencies failed (``ctx.workflow.failed_dependencies()``).

Each handler run writes records into ``wf_runs``, a table of its own in the queue database
(over a connection of the handler's thread, never the worker's), so the records and the queue's
rows are read by one clock and one database:

* ``start``, when it begins: the job's row as the handler reads it then (its lease token, the
  claim's ``started_at`` and attempt), the handler's wall clock in ms (the clock the worker
  writes ``finished_at`` with, on the same host), and a snapshot of its dependencies taken
  after its claim: how many there are, how many were completed and how many dead-lettered or
  cancelled at that moment, and the latest of their ``finished_at``. The row and the snapshot
  are read by the insert itself, one statement, so one database snapshot.
* ``end``, when it returns, with what it saw (``detail``, JSON).
* ``fail``, when a ``fail`` step raises.

``wf_audit`` is filled by triggers of the test's own (:func:`install_records`) on the queue's
tables: every insert and update of a step row (``waiting`` and ``released_at`` before and after)
and every change of a workflow job's ``state`` or ``due_at``. It is what lets the checker tell
that a step was released once and its counter never went below zero, not only that the end
state looks right.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID

import psycopg

from caravel import JobContext, JobRegistry, RetryPolicy
from tests.faults.effects_app import backend_of, mariadb_connect, pg_dsn, sqlite_path

__all__ = [
    "QUEUE",
    "QUEUE_URL_ENV",
    "TENANT",
    "FailingStep",
    "StepFailed",
    "WfStep",
    "connect",
    "execute",
    "id_param",
    "install_records",
    "registry",
]

QUEUE = "wf-faults"
TENANT = "tenant-wf"
QUEUE_URL_ENV = "CARAVEL_WF_QUEUE_URL"
STEP_TYPE = "tests.workflow.step.v1"
FAILING_TYPE = "tests.workflow.failing.v1"

registry = JobRegistry()


@dataclass(frozen=True)
class WfStep:
    """One step's job. ``sleep``: seconds the handler waits (cooperatively) after its start
    record; ``group``/``expect``: the group a ``fan_in`` reads and its size; ``reads``: the
    single steps a ``join`` reads."""

    role: str = "work"
    sleep: float = 0.0
    group: str = ""
    expect: int = 0
    reads: tuple[str, ...] = ()


@dataclass(frozen=True)
class FailingStep:
    """A step whose handler always raises (its own type, so it can have its own retries)."""

    note: str = ""


class StepFailed(RuntimeError):
    """Raised by a ``fail`` step, every attempt."""


# ----- the records' tables -------------------------------------------------------------------

_RUNS_COLUMNS = (
    "job_id {text} NOT NULL, step {text} NOT NULL, idx INTEGER, attempt INTEGER NOT NULL,"
    " event {short} NOT NULL, pid INTEGER NOT NULL, at_ms BIGINT NOT NULL, lease_token BIGINT,"
    " claimed_at BIGINT, row_attempt INTEGER, deps INTEGER, deps_completed INTEGER,"
    " deps_failed INTEGER, deps_finished_max BIGINT, detail TEXT"
)
_AUDIT_COLUMNS = (
    "source {short} NOT NULL, job_id {text} NOT NULL, old_waiting INTEGER, new_waiting INTEGER,"
    " old_released BIGINT, new_released BIGINT, old_state {short}, new_state {short},"
    " old_due BIGINT, new_due BIGINT"
)
_STEP_VALUES = (
    "INSERT INTO wf_audit (source, job_id, old_waiting, new_waiting, old_released,"
    " new_released) VALUES ('{source}', {id}, {old_waiting}, NEW.waiting, {old_released},"
    " NEW.released_at)"
)
_JOB_VALUES = (
    "INSERT INTO wf_audit (source, job_id, old_state, new_state, old_due, new_due)"
    " VALUES ('job', {id}, OLD.state, NEW.state, OLD.due_at, NEW.due_at)"
)


def _step_insert(id_: str) -> str:
    return _STEP_VALUES.format(source="insert", id=id_, old_waiting="NULL", old_released="NULL")


def _step_update(id_: str) -> str:
    return _STEP_VALUES.format(
        source="update", id=id_, old_waiting="OLD.waiting", old_released="OLD.released_at"
    )


def _tables(key: str, text: str, short: str, suffix: str = "") -> list[str]:
    """``wf_runs`` and ``wf_audit`` with the dialect's key column and text types."""
    return [
        f"CREATE TABLE {name} (id {key}, {columns.format(text=text, short=short)}){suffix}"
        for name, columns in (("wf_runs", _RUNS_COLUMNS), ("wf_audit", _AUDIT_COLUMNS))
    ]


def _postgresql_ddl() -> list[str]:
    job_changed = (
        "NEW.workflow_id IS NOT NULL AND (OLD.state IS DISTINCT FROM NEW.state"
        " OR OLD.due_at IS DISTINCT FROM NEW.due_at)"
    )
    return [
        *_tables("BIGSERIAL PRIMARY KEY", "TEXT", "TEXT"),
        "CREATE FUNCTION wf_audit_step_insert() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        + _step_insert("NEW.job_id::text")
        + "; RETURN NULL; END $$",
        "CREATE FUNCTION wf_audit_step_update() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        + _step_update("NEW.job_id::text")
        + "; RETURN NULL; END $$",
        "CREATE FUNCTION wf_audit_job() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        + _JOB_VALUES.format(id="NEW.id::text")
        + "; RETURN NULL; END $$",
        "CREATE TRIGGER wf_audit_step_insert AFTER INSERT ON caravel_workflow_steps"
        " FOR EACH ROW EXECUTE FUNCTION wf_audit_step_insert()",
        "CREATE TRIGGER wf_audit_step_update AFTER UPDATE ON caravel_workflow_steps"
        " FOR EACH ROW EXECUTE FUNCTION wf_audit_step_update()",
        f"CREATE TRIGGER wf_audit_job AFTER UPDATE ON caravel_jobs FOR EACH ROW"
        f" WHEN ({job_changed}) EXECUTE FUNCTION wf_audit_job()",
    ]


def _sqlite_ddl() -> list[str]:
    job_changed = (
        "NEW.workflow_id IS NOT NULL AND (OLD.state IS NOT NEW.state"
        " OR OLD.due_at IS NOT NEW.due_at)"
    )
    return [
        *_tables("INTEGER PRIMARY KEY AUTOINCREMENT", "TEXT", "TEXT"),
        "CREATE TRIGGER wf_audit_step_insert AFTER INSERT ON caravel_workflow_steps BEGIN "
        + _step_insert("NEW.job_id")
        + "; END",
        "CREATE TRIGGER wf_audit_step_update AFTER UPDATE ON caravel_workflow_steps BEGIN "
        + _step_update("NEW.job_id")
        + "; END",
        f"CREATE TRIGGER wf_audit_job AFTER UPDATE ON caravel_jobs WHEN {job_changed} BEGIN "
        + _JOB_VALUES.format(id="NEW.id")
        + "; END",
    ]


def _mariadb_ddl() -> list[str]:
    job_changed = (
        "NEW.workflow_id IS NOT NULL AND (NOT (OLD.state <=> NEW.state)"
        " OR NOT (OLD.due_at <=> NEW.due_at))"
    )
    return [
        *_tables(
            "BIGINT AUTO_INCREMENT PRIMARY KEY", "VARCHAR(160)", "VARCHAR(16)", " ENGINE=InnoDB"
        ),
        "CREATE TRIGGER wf_audit_step_insert AFTER INSERT ON caravel_workflow_steps"
        " FOR EACH ROW " + _step_insert("CAST(NEW.job_id AS CHAR)"),
        "CREATE TRIGGER wf_audit_step_update AFTER UPDATE ON caravel_workflow_steps"
        " FOR EACH ROW " + _step_update("CAST(NEW.job_id AS CHAR)"),
        f"CREATE TRIGGER wf_audit_job AFTER UPDATE ON caravel_jobs FOR EACH ROW"
        f" BEGIN IF {job_changed} THEN "
        + _JOB_VALUES.format(id="CAST(NEW.id AS CHAR)")
        + "; END IF; END",
    ]


def install_records(url: str) -> None:
    """Create ``wf_runs``, ``wf_audit`` and the audit triggers in the migrated queue database
    ``url``."""
    backend = backend_of(url)
    ddl = {"sqlite": _sqlite_ddl, "mariadb": _mariadb_ddl}.get(backend, _postgresql_ddl)()
    conn = connect(url)
    try:
        for statement in ddl:
            execute(conn, backend, statement)
    finally:
        conn.close()


# ----- plain SQL on the queue database ---------------------------------------------------------


def connect(url: str) -> Any:
    """An autocommit connection to the queue database ``url`` (SQLite, PostgreSQL, MariaDB)."""
    backend = backend_of(url)
    if backend == "sqlite":
        conn = sqlite3.connect(sqlite_path(url), timeout=30, isolation_level=None)
        conn.execute("PRAGMA busy_timeout = 30000")
        return conn
    if backend == "mariadb":
        return mariadb_connect(url)
    return psycopg.connect(pg_dsn(url), autocommit=True, connect_timeout=5)


def execute(conn: Any, backend: str, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
    if backend == "sqlite":
        return list(conn.execute(sql, params).fetchall())
    if backend == "mariadb":
        with conn.cursor() as cursor:
            cursor.execute(sql.replace("?", "%s"), params)
            return list(cursor.fetchall()) if cursor.description is not None else []
    cursor = conn.execute(sql.replace("?", "%s"), params)
    return list(cursor.fetchall()) if cursor.description is not None else []


def id_param(backend: str, job_id: UUID) -> Any:
    """A job id as the backend's ``caravel_jobs.id`` compares with it."""
    if backend == "sqlite":
        return job_id.hex
    if backend == "mariadb":
        return str(job_id)
    return job_id


# ----- the handlers' records -----------------------------------------------------------------

_local = threading.local()


def _connection() -> tuple[Any, str]:
    """This thread's connection to the queue database (made on first use)."""
    url = os.environ[QUEUE_URL_ENV]
    conn = getattr(_local, "conn", None)
    if conn is None:
        conn = _local.conn = connect(url)
    return conn, backend_of(url)


def _now_ms() -> int:
    # The clock the worker's SystemClock reads (finished_at, started_at), in the same unit.
    return time.time_ns() // 1_000_000


_COLUMNS = (
    "job_id, step, idx, attempt, event, pid, at_ms, lease_token, claimed_at, row_attempt, deps,"
    " deps_completed, deps_failed, deps_finished_max, detail"
)
_DEPENDENCIES = (
    "FROM caravel_workflow_edges e JOIN caravel_jobs p ON p.id = e.parent_id"
    " WHERE e.child_id = j.id"
)
#: A start record: the job's row and its dependencies' states as one statement sees them (one
#: snapshot, taken after the claim: a dependency not finished here was not finished when the
#: step was claimed either).
_START = (
    f"INSERT INTO wf_runs ({_COLUMNS}) SELECT ?, ?, ?, ?, 'start', ?, ?, j.lease_token,"
    f" j.started_at, j.attempt, (SELECT count(*) {_DEPENDENCIES}),"
    f" (SELECT count(*) {_DEPENDENCIES} AND p.state = 'completed'),"
    f" (SELECT count(*) {_DEPENDENCIES} AND p.state IN ('dead_letter', 'cancelled')),"
    f" (SELECT max(p.finished_at) {_DEPENDENCIES}), ? FROM caravel_jobs j WHERE j.id = ?"
)
_OTHER = (
    f"INSERT INTO wf_runs ({_COLUMNS}) VALUES"
    " (?, ?, ?, ?, ?, ?, ?, NULL, NULL, NULL, NULL, NULL, NULL, NULL, ?)"
)


def _record(ctx: JobContext[Any], event: str, detail: object = None) -> None:
    """One ``wf_runs`` row for this run (see :data:`_START` for what a start reads)."""
    conn, backend = _connection()
    workflow = ctx.workflow
    step = workflow.step if workflow is not None else "?"
    index = workflow.index if workflow is not None else None
    # Read before the statement, after the claim: no later than the snapshot it takes.
    at = _now_ms()
    run = (str(ctx.job_id), step, index, ctx.attempt)
    text = None if detail is None else json.dumps(detail)
    if event == "start":
        me = id_param(backend, ctx.job_id)
        execute(conn, backend, _START, (*run, os.getpid(), at, text, me))
    else:
        execute(conn, backend, _OTHER, (*run, event, os.getpid(), at, text))


async def _fan_in(ctx: JobContext[Any], group: str, expect: int) -> dict[str, Any]:
    """Every result of ``group`` through the paged reader, and whether it is what the members
    returned."""
    workflow = ctx.workflow
    assert workflow is not None  # checked by the caller
    indexes: list[int] = []
    own = completed = 0
    async for outcome in workflow.results(group):
        indexes.append(outcome.index)
        own += outcome.result == {"step": group, "i": outcome.index}
        completed += outcome.state == "completed"
    return {
        "count": len(indexes),
        "indexes_exact": indexes == list(range(expect)),
        "own_results": own,
        "completed": completed,
    }


async def _joined(ctx: JobContext[Any], reads: tuple[str, ...]) -> dict[str, Any]:
    workflow = ctx.workflow
    assert workflow is not None  # checked by the caller
    got = {name: await workflow.result(name) for name in reads}
    return {"own_results": sum(got[name] == {"step": name, "i": None} for name in reads)}


@registry.handles(STEP_TYPE, WfStep)
async def run_step(job: WfStep, ctx: JobContext[Any]) -> dict[str, Any]:
    workflow = ctx.workflow
    if workflow is None:
        await asyncio.to_thread(_record, ctx, "start", {"error": "no ctx.workflow"})
        raise StepFailed("a workflow step ran without ctx.workflow")
    await asyncio.to_thread(_record, ctx, "start")
    if job.sleep > 0:
        await asyncio.sleep(job.sleep)  # busy for real: leases run out meanwhile
    detail: dict[str, Any] | None = None
    if job.role == "fan_in":
        detail = await _fan_in(ctx, job.group, job.expect)
    elif job.role == "join":
        detail = await _joined(ctx, job.reads)
    elif job.role == "continue":
        failed = await workflow.failed_dependencies()
        detail = {"failed": sorted([[d.step, d.index, d.state] for d in failed])}
    await asyncio.to_thread(_record, ctx, "end", detail)
    return {"step": workflow.step, "i": workflow.index}


@registry.handles(
    FAILING_TYPE,
    FailingStep,
    retry=RetryPolicy(
        max_attempts=2, base_delay=timedelta(milliseconds=50), max_delay=timedelta(seconds=1)
    ),
)
async def run_failing(job: FailingStep, ctx: JobContext[Any]) -> None:
    await asyncio.to_thread(_record, ctx, "start")
    await asyncio.to_thread(_record, ctx, "fail")
    raise StepFailed("this step always fails")
