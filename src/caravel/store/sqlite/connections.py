"""SQLite connections: the engines the store opens on a file (WAL, a busy timeout, read-only
readers), the thread-bound connection its shared operations use, and how its transactions begin
and end (``BEGIN IMMEDIATE``, ``synchronous`` per transaction)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine.result import IteratorResult, SimpleResultMetaData
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from caravel.store.protocol import NewJob
from caravel.store.urls import async_url

__all__ = [
    "BUSY_TIMEOUT_MS",
    "LOCK_WAIT_NOTED_MS",
    "CallerWrites",
    "ThreadConnection",
    "create_engine",
    "create_migration_engine",
    "read_only_url",
]

BUSY_TIMEOUT_MS = 30_000
LOCK_WAIT_NOTED_MS = 50
_READONLY_OPTION = "caravel_readonly"

T = TypeVar("T")

#: A job's values as a statement's positional parameters.
_Parameters = Callable[[NewJob], tuple[Any, ...]]


def _file_url(url: str | sa.URL, mode: str) -> sa.URL:
    parsed = async_url(url)
    path = parsed.database or ""
    if not path or path == ":memory:" or path.startswith("file:"):
        return parsed
    return parsed.set(database=f"file:{path}", query={**parsed.query, "mode": mode, "uri": "true"})


def read_only_url(url: str | sa.URL) -> sa.URL:
    """The URL that opens the same file with ``mode=ro``: SQLite itself refuses every write."""
    return _file_url(url, "ro")


def _install(engine: sa.Engine, *, read_only: bool, set_wal: bool) -> None:
    """Every connection waits on a busy file instead of failing, runs in WAL mode with full
    fsync (unless ``read_only`` or not ``set_wal``), and every write transaction starts with
    ``BEGIN IMMEDIATE``."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event, below, issue BEGIN itself.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if not read_only and set_wal:
            # Switching to WAL needs the file to itself; once it is in WAL (the usual case after
            # the first connection) there is nothing to switch, so do not contend for it.
            cursor.execute("PRAGMA journal_mode")
            mode = cursor.fetchone()
            if mode is None or str(mode[0]).lower() != "wal":
                cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = FULL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        if read_only or conn.get_execution_options().get(_READONLY_OPTION):
            conn.exec_driver_sql("BEGIN")
        else:
            conn.exec_driver_sql("BEGIN IMMEDIATE")


def create_engine(
    url: str | sa.URL, *, read_only: bool = False, set_wal: bool = True
) -> AsyncEngine:
    """An async engine for a SQLite file, set up for WAL, busy waits and ``BEGIN IMMEDIATE``.

    The file is opened with ``mode=rw`` (or ``mode=ro``): the queue never creates a database, so
    a wrong or removed path fails loudly instead of silently starting an empty one. With
    ``set_wal=False`` the file keeps whatever journal mode its owner chose (the outbox relay
    reads the application's database and leaves that choice to the application).
    """
    target = _file_url(url, "ro" if read_only else "rw")
    # No rollback when a connection goes back to the pool: every use goes through a SQLAlchemy
    # transaction that commits or rolls back itself (also when cancelled), and through aiosqlite
    # each call is a round trip to the connection's thread.
    engine = create_async_engine(target, pool_size=5, max_overflow=5, pool_reset_on_return=None)
    _install(engine.sync_engine, read_only=read_only, set_wal=set_wal)
    return engine


def create_migration_engine(url: sa.URL) -> sa.Engine:
    """A blocking (pysqlite) engine without a pool for a migration that must be one
    transaction: it begins with ``BEGIN IMMEDIATE``, so it holds the write lock from its first
    statement, and its DDL is part of it (the driver's own transaction handling, which would
    leave DDL outside, is off). The file keeps its journal mode."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    _install(engine, read_only=False, set_wal=False)
    return engine


def _blocking_engine(engine: AsyncEngine, *, pooled: bool = True) -> sa.Engine:
    """A blocking (pysqlite) engine on the same file, for the store's two threads, each of which
    has at most one connection in use at a time; not ``pooled``, one whose every connection is
    new (for a connection the store keeps itself)."""
    url = engine.url.set(drivername="sqlite+pysqlite")
    pool: dict[str, Any] = (
        {"pool_size": 2, "max_overflow": 0} if pooled else {"poolclass": sa.pool.NullPool}
    )
    blocking = sa.create_engine(
        url, pool_reset_on_return=None, connect_args={"check_same_thread": False}, **pool
    )
    _install(blocking, read_only=url.query.get("mode") == "ro", set_wal=True)
    return blocking


class CallerWrites:
    """The connection callers' threads write on, each in a transaction of its own (the sync
    facade's one-job enqueue), on ``engine`` (unpooled: the connection is kept here). Callers
    take turns on it, so they never queue on SQLite's lock behind each other, only behind the
    store's writer thread, as another process would."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine
        self._turn = threading.Lock()
        self._conn: sa.PoolProxiedConnection | None = None
        self._closed = False

    def run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """``work(connection)`` inside one ``BEGIN IMMEDIATE`` transaction on the calling
        thread, straight on the driver (SQLAlchemy's transaction and execution work would cost
        about as much as the insert). A connection that failed mid-transaction is closed, which
        rolls its transaction back."""
        try:
            with self._turn:
                if self._closed:
                    raise sqlite3.ProgrammingError("the queue's SQLite store is closed")
                if self._conn is None:
                    self._conn = self._engine.raw_connection()
                pooled = self._conn
                try:
                    driver: sqlite3.Connection = pooled.driver_connection  # type: ignore[assignment]
                    driver.execute("BEGIN IMMEDIATE")
                    result = work(driver)
                    driver.execute("COMMIT")
                except BaseException:
                    self._conn = None
                    pooled.close()
                    raise
                return result
        finally:
            if self._closed:  # closed meanwhile, while this caller had its turn
                self._release()

    def close(self) -> None:
        """Close the connection; one in use is closed by its caller once its turn ends (closing
        runs on the store's loop, which must not wait for a caller that may be waiting on SQLite's
        lock for a transaction the loop drives)."""
        self._closed = True
        self._release()
        self._engine.dispose()

    def _release(self) -> None:
        if self._turn.acquire(blocking=False):
            try:
                conn, self._conn = self._conn, None
                if conn is not None:
                    conn.close()
            finally:
                self._turn.release()


_NO_ROWS = SimpleResultMetaData([])


class ThreadConnection:
    """A connection of the store's blocking engine as the shared operations use one: each
    statement is handed to the thread that owns the connection and comes back with its rows
    fetched. A write transaction keeps its connection from its first statement to its end; a
    read takes one for each statement, which is its own read transaction (every read of the
    shared operations is one statement)."""

    def __init__(
        self,
        hand_over: Callable[[Callable[[], Any]], Awaitable[Any]],
        engine: sa.Engine,
        *,
        read: bool,
        durable: bool = True,
    ) -> None:
        self._hand_over = hand_over
        self._engine = engine
        self._read = read
        self._durable = durable
        self._conn: sa.Connection | None = None

    async def execute(self, statement: Any, parameters: Any = None) -> sa.Result[Any]:
        def run() -> sa.FrozenResult[Any] | None:
            if self._read:
                with self._engine.connect() as conn:
                    conn.execution_options(**{_READONLY_OPTION: True})
                    with conn.begin():
                        return _frozen(conn.execute(statement, parameters))
            if self._conn is None:
                self._conn = self._engine.connect()
                _begin(self._conn, durable=self._durable)
            return _frozen(self._conn.execute(statement, parameters))

        frozen: sa.FrozenResult[Any] | None = await self._hand_over(run)
        if frozen is None:
            return IteratorResult(_NO_ROWS, iter([]))
        return frozen()

    async def end(self, *, commit: bool) -> None:
        """Commit (or roll back) the write transaction and give its connection back. Handed
        over like a statement, so it follows every statement handed over before it, also those
        whose caller was cancelled before they ran."""

        def run() -> None:
            conn, self._conn = self._conn, None
            if conn is not None:
                _finish_write(conn, commit=commit, durable=self._durable)

        await self._hand_over(run)


def _finish(conn: sa.Connection, *, commit: bool) -> None:
    """End ``conn``'s transaction and give it back to the pool. A failed COMMIT can leave the
    transaction open (and SQLite's write lock held), so that connection is discarded, never
    pooled."""
    try:
        if commit:
            conn.commit()
        else:
            conn.rollback()
    except BaseException:
        conn.invalidate()
        raise
    finally:
        conn.close()


def _set_synchronous(conn: sa.Connection, level: str) -> None:
    """Set ``PRAGMA synchronous`` on ``conn`` outside any transaction (straight on the driver:
    through SQLAlchemy the statement would begin one)."""
    driver: sqlite3.Connection = conn.connection.driver_connection  # type: ignore[assignment]
    driver.execute(f"PRAGMA synchronous = {level}")


def _begin(conn: sa.Connection, *, durable: bool) -> None:
    """Begin a write transaction. One that need not be ``durable`` commits with
    ``synchronous = NORMAL``: in WAL mode its commit is written to the log but not synced, so
    it survives the process crashing but not the machine losing power; the next durable commit
    (or checkpoint) syncs the log, and every commit before it with it."""
    if not durable:
        _set_synchronous(conn, "NORMAL")
    conn.begin()


def _finish_write(conn: sa.Connection, *, commit: bool, durable: bool) -> None:
    """End a write transaction :func:`_begin` began and give its connection back with full
    syncing again (a connection that cannot be set back is discarded)."""
    if not durable:
        try:
            if commit:
                conn.commit()
            else:
                conn.rollback()
            _set_synchronous(conn, "FULL")
        except BaseException:
            conn.invalidate()
            conn.close()
            raise
    _finish(conn, commit=commit)


def _pass_on(done: Future[T], waiter: asyncio.Future[T]) -> None:
    if waiter.cancelled():  # the caller stopped waiting and reports its own cancellation
        return
    error = done.exception()
    if error is not None:
        waiter.set_exception(error)
    else:
        waiter.set_result(done.result())


def _frozen(result: sa.CursorResult[Any]) -> sa.FrozenResult[Any] | None:
    return result.freeze() if result.returns_rows else None
