"""How the PostgreSQL store reaches the server: the engine and its connection settings, the hot
connections kept checked out in autocommit for the one-statement hot paths, the blocking ones
callers' threads use for the sync facade's one-job enqueue, and cutting a connection that is
stuck past its deadline."""

from __future__ import annotations

import asyncio
import logging
import socket
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any

import psycopg
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.util.concurrency import greenlet_spawn

from caravel.store.base import SqlStore
from caravel.store.blocking import Deadlines
from caravel.store.errors import ErrorTranslation
from caravel.store.postgresql.blocking import BlockingUse, blocking_connections
from caravel.store.postgresql.statements import compile_for_driver, execute
from caravel.store.urls import PostgresOptions, async_url, hosts_of, postgres_options

__all__ = [
    "CONNECT_ARGS",
    "HOT_CONNECTIONS",
    "ConnectedStore",
    "HotConnections",
    "HotUse",
    "create_engine",
    "driver_dsn",
    "options_of",
]

logger = logging.getLogger("caravel.store")

#: Shown in pg_stat_activity for every connection the queue opens.
APPLICATION_NAME = "caravel"

#: Every connection detects a dead peer in bounded time: TCP keepalives probe an idle link
#: (about 25 s), ``tcp_user_timeout`` fails a write nobody acknowledges within 20 s, and no queue
#: statement may run longer than 30 s. A link that silently drops packets therefore surfaces as
#: a database error (and the worker stops) instead of a hang.
CONNECT_ARGS: dict[str, Any] = {
    "application_name": APPLICATION_NAME,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 20_000,
    "connect_timeout": 10,
    "options": "-c statement_timeout=30000",
}


#: The URL options each engine was made with (see :class:`~caravel.store.urls.PostgresOptions`).
_OPTIONS: weakref.WeakKeyDictionary[sa.Engine, PostgresOptions] = weakref.WeakKeyDictionary()


def options_of(engine: AsyncEngine) -> PostgresOptions:
    """The Caravel options of the URL ``engine`` was made from; the defaults for an engine made
    elsewhere."""
    return _OPTIONS.get(engine.sync_engine, PostgresOptions())


def connect_args_for(options: PostgresOptions) -> dict[str, Any]:
    """The psycopg connection arguments for every connection the store opens."""
    if not options.transaction_pooling:
        return CONNECT_ARGS
    # Behind transaction pooling a server connection serves another client after each
    # transaction, so nothing may be kept on it: no prepared statement (psycopg then prepares
    # none, even where a statement asks for it), and no startup options, which PgBouncer
    # refuses unless told to ignore them (the statement timeout belongs on the role instead).
    args = {k: v for k, v in CONNECT_ARGS.items() if k != "options"}
    return {**args, "prepare_threshold": None}


def create_engine(
    url: str | sa.URL, *, pool_size: int = 20, read_only: bool = False
) -> AsyncEngine:
    """An async engine for a PostgreSQL URL, through psycopg 3.

    The pool keeps up to ``pool_size`` connections open and opens up to as many again under
    a burst. Connections beyond the pool size are closed when returned, so size the pool for
    the process's usual concurrency (enqueueing request handlers, a worker's fetcher, its
    acknowledgement writers and renewals): opening a connection costs more than the statement.
    With ``read_only`` every session starts with ``default_transaction_read_only``, so the
    server refuses any write on it; it is set again by a statement when the session opens, in
    case something between us and the server (a connection pooler) drops startup options.

    A URL may list several servers (see :mod:`caravel.store.urls`); libpq tries them in order
    for every new connection. Unless the URL says otherwise, a writing engine asks for
    ``target_session_attrs=read-write``, so its connections reach whichever server is the
    primary now.
    """
    options = postgres_options(url)
    url = async_url(url)
    if len(hosts_of(url)) > 1 and "target_session_attrs" not in url.query and not read_only:
        # The queue writes on every connection: of the servers listed, only the one that
        # accepts writes will do, whichever that is now (after a failover, the promoted one).
        url = url.update_query_dict({"target_session_attrs": "read-write"})
    connect_args = connect_args_for(options)
    if read_only and not options.transaction_pooling:
        startup = f"{CONNECT_ARGS['options']} -c default_transaction_read_only=on"
        connect_args = {**CONNECT_ARGS, "options": startup}
    engine = create_async_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size,
        connect_args=connect_args,
    )
    if read_only:
        event.listen(engine.sync_engine, "connect", _read_only_session)
    _OPTIONS[engine.sync_engine] = options
    return engine


def driver_dsn(engine: AsyncEngine) -> str:
    """The engine's URL as a libpq connection string, for connections opened outside its pool
    (wake-up listeners, callers' threads): built by the dialect that builds the pool's, so a
    multi-host URL becomes the same host and port lists either way."""
    _, options = engine.dialect.create_connect_args(engine.url)
    # The dialect also hands its adapters to psycopg ("context"): not a libpq option.
    return psycopg.conninfo.make_conninfo(**{k: v for k, v in options.items() if k != "context"})


def _read_only_session(dbapi_connection: Any, _record: Any) -> None:
    autocommit = dbapi_connection.autocommit
    dbapi_connection.autocommit = True
    try:
        cursor = dbapi_connection.cursor()
        cursor.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
        cursor.close()
    finally:
        dbapi_connection.autocommit = autocommit


#: Connections the one-statement hot paths keep checked out of the pool between uses, for the
#: one-job enqueue and, as many again, for the worker's claims and acknowledgement batches.
HOT_CONNECTIONS = 4

# The worker's statements are driven by an index: a claim walks the claim index in due order
# and stops after its batch; an acknowledgement batch probes the primary key once per lease.
# Without column statistics (a table that filled up faster than autovacuum analyses it) the
# planner guesses that a handful of rows are due, and prefers a bitmap scan of every due row
# followed by a sort, or a sequential scan to find the picked rows: each claim would then read
# the whole backlog. The connections kept for those statements turn both scan types off for
# their session, and a connection given back to the pool gets the server's defaults again.
_INDEX_ONLY = "SET enable_bitmapscan = off; SET enable_seqscan = off"
_DEFAULT_PLANS = "RESET enable_bitmapscan; RESET enable_seqscan"


async def driver_of(conn: AsyncConnection) -> psycopg.AsyncConnection[Any]:
    """The psycopg connection under a SQLAlchemy connection."""
    raw = await conn.get_raw_connection()
    driver: psycopg.AsyncConnection[Any] = raw.driver_connection  # type: ignore[assignment]
    return driver


def cut(driver: Callable[[], Any]) -> None:
    """Shut the socket of ``driver()`` down (without closing the descriptor under the event
    loop): whatever is waiting on it gets end-of-file at once and fails as a lost connection.
    Runs from a timer, so it never raises."""
    try:
        fd = driver().pgconn.socket
        with socket.fromfd(fd, socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except Exception:  # already closed, or not a socket: nothing to cut
        logger.debug("could not cut a stuck connection")
    else:
        logger.warning("a database operation exceeded its deadline; its connection was cut")


class HotConnections:
    """Pooled connections kept checked out between uses, already in autocommit, by whether they
    plan with index scans only (see ``_INDEX_ONLY``): taking one from SQLAlchemy's pool and
    giving it back would cost about as much as all of Caravel's own work in a one-job enqueue.
    Up to :data:`HOT_CONNECTIONS` of each kind are kept. One left mid-statement is discarded; a
    broken one takes the idle ones with it (a server that went away took them all)."""

    def __init__(self, engine: AsyncEngine, *, plan_settings: bool = True) -> None:
        self._engine = engine
        #: Whether the index-only connections get their session settings: not behind
        #: transaction pooling, where a session setting would reach other clients' transactions.
        self.plan_settings = plan_settings
        self.idle: dict[bool, list[Any]] = {False: [], True: []}
        self._closed = False

    async def take(self, *, index_only: bool) -> Any:
        """A connection kept checked out, or one from SQLAlchemy's pool set up as such."""
        idle = self.idle[index_only]
        return idle.pop() if idle else await self.check_out(index_only=index_only)

    async def check_out(self, *, index_only: bool) -> Any:
        """A connection from SQLAlchemy's pool, set up as a hot one."""
        fairy = await self._engine.raw_connection()
        try:
            driver: psycopg.AsyncConnection[Any] = fairy.driver_connection  # type: ignore[assignment]
            await driver.set_autocommit(True)
            if index_only and self.plan_settings:
                await driver.execute(_INDEX_ONLY)
        except BaseException:
            await self.give_back(fairy, index_only=index_only)
            raise
        return fairy

    async def put(self, fairy: Any, *, index_only: bool) -> None:
        """Keep a connection :meth:`take` gave for the next use, or give it back to the pool."""
        driver: psycopg.AsyncConnection[Any] = fairy.driver_connection
        idle = driver.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        kept = self.idle[index_only]
        if idle and not self._closed and len(kept) < HOT_CONNECTIONS:
            kept.append(fairy)
            return
        if driver.broken:
            stale = [*self.idle[False], *self.idle[True]]
            self.idle = {False: [], True: []}
            for other in stale:
                await greenlet_spawn(other.invalidate)
                await greenlet_spawn(other.close)
        await self.give_back(fairy, index_only=index_only)

    async def give_back(self, fairy: Any, *, index_only: bool) -> None:
        """Return a connection to SQLAlchemy's pool as it lent it, or discard it when it was
        left mid-statement, is broken, or could not be given its default settings back."""
        driver: psycopg.AsyncConnection[Any] = fairy.driver_connection
        reusable = driver.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        if reusable:
            try:
                if index_only and self.plan_settings:
                    await driver.execute(_DEFAULT_PLANS)
                await driver.set_autocommit(False)
            except psycopg.Error:
                reusable = False
        if not reusable:
            await greenlet_spawn(fairy.invalidate)
        await greenlet_spawn(fairy.close)

    async def close(self) -> None:
        """Give every idle connection back; those in use go back when they are done."""
        self._closed = True
        idle, self.idle = self.idle, {False: [], True: []}
        for index_only, fairies in idle.items():
            for fairy in fairies:
                await self.give_back(fairy, index_only=index_only)


#: Where a hot connection's kept cursor is stored in the pool's record of it.
_KEPT_CURSOR = "caravel_binary_cursor"


class HotUse:
    """One use of a hot connection, entered with ``async with``: takes it, arms the deadline
    timer that cuts it, gives it back, and translates errors from all three. A plain class, not
    a generator-based context manager: it wraps every one-job enqueue, claim and
    acknowledgement batch."""

    __slots__ = ("_fairy", "_hot", "_index_only", "_timeout", "_timer", "_translation")

    def __init__(
        self, hot: HotConnections, translation: ErrorTranslation, timeout: float, index_only: bool
    ) -> None:
        self._hot = hot
        self._translation = translation
        self._timeout = timeout
        self._index_only = index_only

    async def __aenter__(self) -> psycopg.AsyncConnection[Any]:
        with self._translation:
            self._fairy = await self._hot.take(index_only=self._index_only)
        driver: psycopg.AsyncConnection[Any] = self._fairy.driver_connection
        self._timer = asyncio.get_running_loop().call_later(self._timeout, cut, lambda: driver)
        return driver

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._timer.cancel()
        with self._translation:
            await self._hot.put(self._fairy, index_only=self._index_only)
        self._translation.__exit__(kind, exc, traceback)

    def cursor(self) -> psycopg.AsyncCursor[Any]:
        """A binary cursor kept with the connection taken, inside the block: making a cursor
        per statement costs a noticeable share of a one-job enqueue. It lives in the pool's
        record of the connection, so it goes when the connection does."""
        info: dict[str, Any] = self._fairy.info
        cursor: psycopg.AsyncCursor[Any] | None = info.get(_KEPT_CURSOR)
        if cursor is None:
            cursor = info[_KEPT_CURSOR] = self._fairy.driver_connection.cursor(binary=True)
        return cursor


class ConnectedStore(SqlStore[AsyncConnection]):
    """The PostgreSQL store's ways to its connections: SQLAlchemy transactions (one statement
    in autocommit, acknowledgements without waiting for the disk), the hot connections, and
    statements run straight on psycopg."""

    driver_errors = (psycopg.Error,)

    def __init__(self, engine: AsyncEngine) -> None:
        super().__init__(engine)
        self._options = options_of(engine)
        self._hot = HotConnections(engine, plan_settings=not self._options.transaction_pooling)
        connect_args = connect_args_for(self._options)
        # The uses of blocking connections, each cut once past its deadline.
        self._deadlines: Deadlines[psycopg.Connection[Any]] = Deadlines(
            lambda conn: cut(lambda: conn)
        )
        # Callers' threads' own, with the settings of the engine's connections, as many kept
        # and open at most as the engine's pool keeps and opens.
        pool = engine.sync_engine.pool
        keep = pool.size() if isinstance(pool, sa.pool.QueuePool) else HOT_CONNECTIONS
        self._blocking = blocking_connections(
            lambda: psycopg.Connection.connect(self._driver_dsn(), autocommit=True, **connect_args),
            keep=keep,
            limit=2 * keep,
        )

    def _driver_dsn(self) -> str:
        """The engine's URL as libpq takes it, for connections opened outside its pool."""
        return driver_dsn(self.engine)

    def _blocking_use(self, operation: str, loop: asyncio.AbstractEventLoop) -> BlockingUse:
        """A blocking connection in autocommit for a caller's thread (the sync facade's one-job
        enqueue), with the deadline held by ``loop``, the store's event loop. Errors are
        translated as on the loop; inside the block, the connection's kept cursor."""
        translation = self._translated(operation)
        timeout = self.operation_timeout
        return BlockingUse(self._blocking, self._deadlines, translation, timeout, loop)

    def _autocommit(self, operation: str, *, index_only: bool = False) -> HotUse:
        """A hot psycopg connection in autocommit mode, for the one-statement hot paths (a
        one-job enqueue, a claim, an acknowledgement batch): each statement is its own
        transaction. Errors are translated and the deadline holds as on every other operation.
        With ``index_only`` the connection plans without bitmap or sequential scans. Inside the
        block, :meth:`HotUse.cursor` is a cursor kept with the connection."""
        return HotUse(self._hot, self._translated(operation), self.operation_timeout, index_only)

    def _compiled(self, name: str, build: Callable[[], Any]) -> tuple[str, dict[str, Any]]:
        """A statement's SQL text and default parameters for psycopg, compiled once."""
        dialect = self.engine.dialect
        found: tuple[str, dict[str, Any]] = self._statement(
            f"driver_{name}", lambda: compile_for_driver(build(), dialect)
        )
        return found

    async def _run(
        self,
        driver: psycopg.AsyncConnection[Any],
        name: str,
        build: Callable[[], Any],
        values: dict[str, Any],
    ) -> list[Any]:
        """Run the statement ``build()`` straight on psycopg (see
        :func:`~caravel.store.postgresql.statements.execute`), compiled once under ``name``."""
        sql, defaults = self._compiled(name, build)
        return await execute(driver, sql, {**defaults, **values})

    def _sever(self, conn: AsyncConnection) -> None:
        cut(lambda: conn.sync_connection.connection.driver_connection)  # type: ignore[union-attr]

    @asynccontextmanager
    async def _transaction(
        self, *, readonly: bool, durable: bool = True, single: bool = False
    ) -> AsyncIterator[AsyncConnection]:
        if single and durable:
            # One statement is its own transaction: no BEGIN and COMMIT round trips.
            async with self.engine.connect() as conn:
                await conn.execution_options(isolation_level="AUTOCOMMIT")
                yield conn
            return
        async with self.engine.begin() as conn:
            if not durable:
                # Acknowledgements (unless the worker asks for durable ones) and presence. The
                # commit returns before it reaches disk; if the database server itself crashes
                # in that window, the acknowledgement is lost and the job runs again after its
                # lease expires (at-least-once allows that). Claims and enqueues stay durable.
                await conn.exec_driver_sql("SET LOCAL synchronous_commit TO OFF")
            yield conn

    async def close(self) -> None:
        if self.closed:
            return
        await self._hot.close()
        self._blocking.close()
        await super().close()
