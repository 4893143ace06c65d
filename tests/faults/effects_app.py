"""The worker app of the fault suite (``caravel worker --app tests.faults.effects_app:registry``).

Every execution of a job is recorded in an *application* database (not the queue's): the URL is
read from ``CARAVEL_FAULTS_APP_URL`` (``sqlite:///path``, ``postgresql://...`` or
``mariadb://...``, the last through PyMySQL). The test creates the two tables with plain SQL
(:func:`create_app_schema`):

* ``effects(job_id PRIMARY KEY, tenant, value)``: the job's one side effect, written with
  insert-if-absent semantics, so a re-run finds the row, leaves it alone and succeeds. ``value``
  is JSON naming the attempt and process that wrote it.
* ``ledger(id, job_id, attempt, pid, event, at)``: append-only, one row per event of every
  execution attempt: ``start`` when the handler begins, ``end`` when it succeeded (committed in the
  same transaction as the effect), ``fail`` when it raised on purpose.

The payload steers the handler: ``sleep`` seconds (cooperative), ``cpu`` seconds of busy loop
(blocking the event loop in :class:`Effect`, a worker thread in :class:`SyncEffect`), a seeded
``fail_probability``, and ``poison`` (the handler kills its own process with SIGKILL).

:class:`BatchDone` is a batch's callback: its effect's value carries the counts it was handed
(:attr:`~caravel.JobContext.batch`), so a test sees how many times it ran and with what.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import sqlite3
import threading
import time
from dataclasses import dataclass
from typing import Any

import psycopg
import pymysql
from sqlalchemy.engine import make_url

from caravel import JobContext, JobRegistry

__all__ = [
    "APP_URL_ENV",
    "AppConnection",
    "BatchDone",
    "Blob",
    "Effect",
    "HandlerFailure",
    "SyncEffect",
    "backend_of",
    "connect_app",
    "create_app_schema",
    "record_effect",
    "record_start",
    "registry",
]

APP_URL_ENV = "CARAVEL_FAULTS_APP_URL"

registry = JobRegistry()


@dataclass(frozen=True)
class Effect:
    """One job of the fault workload (async handler).

    ``sleep_attempts``/``poison_attempts`` limit sleeping/poisoning to attempts up to that number
    (0: every attempt). ``fail_probability`` is drawn from a generator seeded with ``seed``, the
    job id and the attempt, so a run is reproducible.
    """

    value: int = 0
    sleep: float = 0.0
    sleep_attempts: int = 0
    cpu: float = 0.0
    fail_probability: float = 0.0
    seed: int = 0
    poison: bool = False
    poison_attempts: int = 0
    tag: str = ""


@dataclass(frozen=True)
class SyncEffect(Effect):
    """The same workload through a synchronous handler (runs in the worker's thread pool)."""


@dataclass(frozen=True)
class Blob:
    """Arbitrary JSON for the fuzz tests (its handler records the effect like :class:`Effect`)."""

    data: Any = None
    text: str = ""
    number: int = 0


@dataclass(frozen=True)
class BatchDone:
    """A batch's callback (its handler records the counts it was handed as its effect)."""

    label: str = ""


class HandlerFailure(RuntimeError):
    """Raised by a handler whose seeded draw said fail."""


# ----- the application database --------------------------------------------------------------

SQLITE_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS effects ("
    " job_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS ledger ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, attempt INTEGER NOT NULL,"
    " pid INTEGER NOT NULL, event TEXT NOT NULL, at REAL NOT NULL)",
)
POSTGRES_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS effects ("
    " job_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS ledger ("
    " id BIGSERIAL PRIMARY KEY, job_id TEXT NOT NULL, attempt INTEGER NOT NULL,"
    " pid INTEGER NOT NULL, event TEXT NOT NULL, at DOUBLE PRECISION NOT NULL)",
)

MARIADB_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS effects ("
    " job_id VARCHAR(36) PRIMARY KEY, tenant VARCHAR(255) NOT NULL, value TEXT NOT NULL)"
    " ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS ledger ("
    " id BIGINT AUTO_INCREMENT PRIMARY KEY, job_id VARCHAR(36) NOT NULL,"
    " attempt INTEGER NOT NULL, pid INTEGER NOT NULL, event VARCHAR(16) NOT NULL,"
    " at DOUBLE NOT NULL) ENGINE=InnoDB",
)
#: MariaDB's spelling of insert-if-absent: a no-op update of a row that is there (INSERT IGNORE
#: would turn every other error into a warning too).
_ON_CONFLICT = "ON CONFLICT (job_id) DO NOTHING"
_MARIADB_ON_CONFLICT = "ON DUPLICATE KEY UPDATE job_id = job_id"

#: Bounded waits for the app database too, so a dead link fails the handler instead of hanging.
PG_CONNECT_ARGS: dict[str, Any] = {
    "connect_timeout": 5,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 20_000,
    "options": "-c statement_timeout=20000",
    "application_name": "caravel-faults-app",
}


def backend_of(url: str) -> str:
    """``sqlite``, ``postgresql`` or ``mariadb`` (a ``mysql://`` URL counts as MariaDB)."""
    name = make_url(url).get_backend_name()
    return "mariadb" if name in ("mariadb", "mysql") else name


def is_sqlite(url: str) -> bool:
    return backend_of(url) == "sqlite"


def is_mariadb(url: str) -> bool:
    return backend_of(url) == "mariadb"


def mariadb_connect(url: str, *, timeout: int = 20) -> Any:
    """A PyMySQL connection (autocommit, ``READ COMMITTED``) to ``url``'s database, each wait
    bounded by ``timeout`` seconds."""
    parsed = make_url(url)
    conn = pymysql.connect(
        host=parsed.host or "127.0.0.1",
        port=parsed.port or 3306,
        user=parsed.username or "root",
        password=parsed.password or "",
        database=parsed.database,
        autocommit=True,
        charset="utf8mb4",
        connect_timeout=5,
        read_timeout=timeout,
        write_timeout=timeout,
    )
    with conn.cursor() as cursor:
        cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    return conn


def sqlite_path(url: str) -> str:
    return make_url(url).database or ""


def pg_dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


class AppConnection:
    """One connection to the app database, with ``?`` placeholders on every database (and
    PostgreSQL's ``ON CONFLICT (job_id) DO NOTHING`` on MariaDB too)."""

    def __init__(self, url: str) -> None:
        self.backend = backend_of(url)
        self.sqlite = self.backend == "sqlite"
        self._conn: Any
        if self.sqlite:
            conn = sqlite3.connect(sqlite_path(url), timeout=30, isolation_level=None)
            conn.execute("PRAGMA busy_timeout = 30000")
            self._conn = conn
        elif self.backend == "mariadb":
            self._conn = mariadb_connect(url)
        else:
            self._conn = psycopg.connect(pg_dsn(url), autocommit=True, **PG_CONNECT_ARGS)

    def _sql(self, sql: str) -> str:
        if self.sqlite:
            return sql
        if self.backend == "mariadb":
            sql = sql.replace(_ON_CONFLICT, _MARIADB_ON_CONFLICT)
        return sql.replace("?", "%s")

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if self.backend == "mariadb":
            with self._conn.cursor() as cursor:
                cursor.execute(self._sql(sql), params)
                return list(cursor.fetchall())
        return list(self._conn.execute(self._sql(sql), params).fetchall())

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        if self.backend == "mariadb":
            with self._conn.cursor() as cursor:
                cursor.execute(self._sql(sql), params)
            return
        self._conn.execute(self._sql(sql), params)

    def transaction(self, statements: list[tuple[str, tuple[Any, ...]]]) -> None:
        """Run ``statements`` in one transaction (SQLite: ``BEGIN IMMEDIATE``)."""
        if self.sqlite:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for sql, params in statements:
                    self._conn.execute(sql, params)
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            return
        if self.backend == "mariadb":
            self._conn.begin()
            try:
                for sql, params in statements:
                    self.execute(sql, params)
                self._conn.commit()
            except BaseException:
                with contextlib.suppress(pymysql.err.Error):  # a broken connection rolled back
                    self._conn.rollback()
                raise
            return
        with self._conn.transaction():
            for sql, params in statements:
                self._conn.execute(self._sql(sql), params)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> AppConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect_app(url: str) -> AppConnection:
    return AppConnection(url)


def create_app_schema(url: str) -> None:
    """Create the effects and ledger tables (plain SQL; the app's own tables, not the queue's)."""
    with connect_app(url) as conn:
        if conn.sqlite:
            conn.query("PRAGMA journal_mode = WAL")
        schema = {"sqlite": SQLITE_SCHEMA, "mariadb": MARIADB_SCHEMA}.get(
            conn.backend, POSTGRES_SCHEMA
        )
        for statement in schema:
            conn.execute(statement)


# ----- the handlers --------------------------------------------------------------------------

_local = threading.local()


def _app_url() -> str:
    return os.environ[APP_URL_ENV]


def _run(statements: list[tuple[str, tuple[Any, ...]]]) -> None:
    """Write through this thread's cached connection; reconnect once if it broke (a restarted or
    unreachable database), then let the error fail the attempt."""
    for tries_left in (1, 0):
        conn: AppConnection | None = getattr(_local, "conn", None)
        try:
            if conn is None:
                conn = _local.conn = connect_app(_app_url())
            conn.transaction(statements)
            return
        except (
            psycopg.OperationalError,
            psycopg.InterfaceError,
            pymysql.err.OperationalError,
            pymysql.err.InterfaceError,
        ):
            _local.conn = None
            if conn is not None:
                with contextlib.suppress(Exception):  # a broken connection: only drop it
                    conn.close()
            if not tries_left:
                raise


def _ledger_row(event: str, ctx: JobContext[object]) -> tuple[str, tuple[Any, ...]]:
    return (
        "INSERT INTO ledger (job_id, attempt, pid, event, at) VALUES (?, ?, ?, ?, ?)",
        (str(ctx.job_id), ctx.attempt, os.getpid(), event, time.time()),
    )


def _fails(job: Effect, ctx: JobContext[object]) -> bool:
    if job.fail_probability <= 0:
        return False
    return random.Random(f"{job.seed}:{ctx.job_id}:{ctx.attempt}").random() < job.fail_probability


def _applies(limit: int, attempt: int) -> bool:
    return limit == 0 or attempt <= limit


def _busy(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sum(range(2000))


def record_start(ctx: JobContext[Any]) -> None:
    """The ledger's ``start`` of this attempt."""
    _run([_ledger_row("start", ctx)])


def record_effect(ctx: JobContext[Any], value: str) -> None:
    """The job's one effect, unless it has one already (then it is left alone: a re-run after a
    takeover has no second effect), and the ledger's ``end``, in one transaction."""
    effect = (
        "INSERT INTO effects (job_id, tenant, value) VALUES (?, ?, ?) "
        "ON CONFLICT (job_id) DO NOTHING",
        (str(ctx.job_id), ctx.tenant_id, value),
    )
    _run([effect, _ledger_row("end", ctx)])


def _begin(job: Effect, ctx: JobContext[object]) -> None:
    record_start(ctx)
    if job.poison and _applies(job.poison_attempts, ctx.attempt):
        os.kill(os.getpid(), signal.SIGKILL)


def _finish(job: Effect, ctx: JobContext[object]) -> None:
    if _fails(job, ctx):
        _run([_ledger_row("fail", ctx)])
        raise HandlerFailure("seeded failure")
    record_effect(ctx, json.dumps({"value": job.value, "attempt": ctx.attempt, "pid": os.getpid()}))


@registry.handles("faults.effect.v1", Effect)
async def effect(job: Effect, ctx: JobContext[object]) -> None:
    _begin(job, ctx)
    if job.sleep > 0 and _applies(job.sleep_attempts, ctx.attempt):
        await asyncio.sleep(job.sleep)  # busy for real: the worker's leases run meanwhile
    if job.cpu > 0:
        _busy(job.cpu)  # holds the event loop: the lease watchdog cannot run meanwhile
    _finish(job, ctx)


@registry.handles("faults.effect-sync.v1", SyncEffect)
def sync_effect(job: SyncEffect, ctx: JobContext[object]) -> None:
    _begin(job, ctx)
    if job.sleep > 0 and _applies(job.sleep_attempts, ctx.attempt):
        time.sleep(job.sleep)  # busy for real, in one of the worker's threads
    if job.cpu > 0:
        _busy(job.cpu)  # a thread the worker cannot interrupt
    _finish(job, ctx)


@registry.handles("faults.blob.v1", Blob)
async def blob(job: Blob, ctx: JobContext[object]) -> None:
    _begin(Effect(), ctx)
    _finish(Effect(), ctx)


@registry.handles("faults.batch-done.v1", BatchDone)
async def batch_done(job: BatchDone, ctx: JobContext[object]) -> None:
    record_start(ctx)
    outcome = ctx.batch
    handed = None
    if outcome is not None:
        handed = {
            "batch_id": str(outcome.batch_id),
            "total": outcome.total,
            "completed": outcome.completed,
            "failed": outcome.failed,
            "cancelled": outcome.cancelled,
        }
    record_effect(ctx, json.dumps({"attempt": ctx.attempt, "pid": os.getpid(), "batch": handed}))
