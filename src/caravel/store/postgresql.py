"""PostgreSQL: claims lock their rows with ``FOR UPDATE SKIP LOCKED`` so competing workers never
wait on each other, and duplicate submissions are settled by ``ON CONFLICT DO NOTHING``."""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import re
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal, NamedTuple
from uuid import UUID

import psycopg
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.util.concurrency import greenlet_spawn

from caravel.jobs import JobState, Lease
from caravel.store.base import SqlStore, claimed_from_rows
from caravel.store.protocol import ClaimBatch, ClaimRequest, InsertOutcome, InsertResult, NewJob
from caravel.store.schema import jobs
from caravel.store.urls import async_url

__all__ = ["PostgresStore", "create_engine"]

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

_SCHEMA_MISSING = {"42P01", "42703"}  # undefined_table, undefined_column


def create_engine(
    url: str | sa.URL, *, pool_size: int = 20, read_only: bool = False
) -> AsyncEngine:
    """An async engine for a PostgreSQL URL, through psycopg 3.

    The pool keeps up to ``pool_size`` connections open and opens up to as many again under
    a burst. Connections beyond the pool size are closed when returned, so size the pool for
    the process's usual concurrency (enqueueing request handlers, a worker's fetcher, its
    acknowledgement writers and renewals): opening a connection costs more than the statement.
    With ``read_only`` every session starts with ``default_transaction_read_only``, so the
    server refuses any write on it.
    """
    connect_args = CONNECT_ARGS
    if read_only:
        options = f"{CONNECT_ARGS['options']} -c default_transaction_read_only=on"
        connect_args = {**CONNECT_ARGS, "options": options}
    return create_async_engine(
        async_url(url),
        pool_size=pool_size,
        max_overflow=pool_size,
        connect_args=connect_args,
    )


_INSERT_UNNEST = sa.text(
    """
    INSERT INTO caravel_jobs (
        id, queue, job_type, tenant_id, idempotency_key, payload, state, attempt,
        max_attempts, due_at, available_at, lease_token, created_at, updated_at, trace_context
    )
    SELECT id, queue, job_type, tenant_id, key, payload, 'ready', 0,
           max_attempts, due, due, 0, created, created, trace
    FROM unnest(
        CAST(:ids AS uuid[]), CAST(:queues AS text[]), CAST(:job_types AS text[]),
        CAST(:tenants AS text[]), CAST(:keys AS text[]), CAST(:payloads AS text[]),
        CAST(:max_attempts AS integer[]), CAST(:due AS bigint[]), CAST(:created AS bigint[]),
        CAST(:traces AS text[])
    ) AS new (id, queue, job_type, tenant_id, key, payload, max_attempts, due, created, trace)
    ON CONFLICT DO NOTHING
    """
)

#: After a batch insert that skipped rows: which of the batch's ids this transaction inserted (a
#: skipped job may share its id with an older row, as when a relay resends an intent).
_INSERTED_HERE = sa.text(
    "SELECT id FROM caravel_jobs WHERE id = ANY(CAST(:ids AS uuid[])) "
    "AND xmin = pg_current_xact_id()::xid"
)

#: Whether a row already holds a job's id or idempotency key (checked for the first job of a
#: COPY, so that a batch submitted again goes straight to the path that skips such rows).
_SEEN_BEFORE = sa.text(
    "SELECT EXISTS (SELECT FROM caravel_jobs WHERE id = CAST(:id AS uuid)) "
    "OR EXISTS (SELECT FROM caravel_jobs WHERE queue = CAST(:queue AS text) "
    "AND tenant_id = CAST(:tenant_id AS text) AND idempotency_key = CAST(:key AS text))"
)

#: The columns a COPY of new jobs fills, in the order of :func:`_copy_row`, and the binary
#: format each is sent in.
_COPY_COLUMNS = (
    ("id", "uuid"),
    ("queue", "text"),
    ("job_type", "text"),
    ("tenant_id", "text"),
    ("idempotency_key", "text"),
    ("payload", "text"),
    ("state", "text"),
    ("attempt", "int4"),
    ("max_attempts", "int4"),
    ("due_at", "int8"),
    ("available_at", "int8"),
    ("lease_token", "int8"),
    ("created_at", "int8"),
    ("updated_at", "int8"),
    ("trace_context", "text"),
)
_COPY_SQL = (
    f"COPY {jobs.name} ({', '.join(name for name, _ in _COPY_COLUMNS)}) FROM STDIN (FORMAT BINARY)"
)
_COPY_TYPES = [kind for _, kind in _COPY_COLUMNS]


_READY = JobState.READY.value


def _copy_row(job: NewJob) -> tuple[Any, ...]:
    """A new job's row as COPY sends it: the same values as an INSERT of the job."""
    return (
        job.id,
        job.queue,
        job.job_type,
        job.tenant_id,
        job.idempotency_key,
        job.payload,
        _READY,
        0,
        job.max_attempts,
        job.due_at,
        job.due_at,
        0,
        job.created_at,
        job.created_at,
        job.trace_context,
    )


class _Collided(Exception):
    """A COPY met a row that was already there; the call goes to the path that skips rows."""


#: A named parameter as SQLAlchemy writes it for psycopg (``%(name)s``).
_BINARY_PLACEHOLDER = re.compile(r"%\((\w+)\)s")

#: Batches up to this size are inserted with plain VALUES rows; larger ones by COPY (or, when
#: a row collides, through arrays).
SMALL_INSERT = 8

InsertStrategy = Literal["one_row", "values", "copy"]

#: How one call inserts its jobs, by the ``total`` its caller gives: the first row whose bound
#: holds it. Every strategy inserts in one transaction and returns an :class:`Inserted`.
#:
#: * ``one_row``: one ``INSERT ... RETURNING`` on a hot autocommit connection, carrying the
#:   queue's NOTIFY when this enqueue leads; a job that collided goes to ``values``.
#: * ``values``: VALUES rows through SQLAlchemy, then the rows that kept jobs out looked up.
#: * ``copy``: one binary COPY per chunk, each while the caller prepares the next; when a row
#:   collides, the call is inserted again through unnested arrays that skip existing rows.
INSERT_STRATEGIES: tuple[tuple[int, InsertStrategy], ...] = (
    (1, "one_row"),
    (SMALL_INSERT, "values"),
    (sys.maxsize, "copy"),
)


class Inserted(NamedTuple):
    """What one insert strategy did: the call's result, and the queues whose NOTIFY its
    transaction carried (PostgreSQL delivers them when it commits)."""

    result: InsertResult
    announced: frozenset[str] = frozenset()


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

#: The channel enqueues announce new work on; the payload is the queue name.
CHANNEL = "caravel_jobs"
LISTEN_RETRY_SECONDS = 1.0
#: At most one enqueue transaction per queue and process carries a NOTIFY within this window.
NOTIFY_COOLDOWN = 0.005
_NOTIFY = sa.text(f"SELECT pg_notify('{CHANNEL}', :queue)")
#: The trailing wake-up sent on its own needs no durability: it does not wait for the disk.
_NOTIFY_ALONE = sa.text(
    f"SELECT set_config('synchronous_commit', 'off', true), pg_notify('{CHANNEL}', :queue)"
)


def _insert_columns() -> list[sa.Column[Any]]:
    skipped = ("lease_expires_at", "started_at", "finished_at", "last_failure")
    return [c for c in jobs.c if c.name not in skipped]


def _insert_one_statement() -> sa.Insert:
    """INSERT one job (bound as ``b_<column>``); the id comes back when it was inserted."""
    return (
        postgresql.insert(jobs)
        .values({c.name: sa.bindparam(f"b_{c.name}", type_=c.type) for c in _insert_columns()})
        .on_conflict_do_nothing()
        .returning(jobs.c.id)
    )


def _insert_one_notify_statement() -> sa.Select[Any]:
    """The same INSERT, sending the queue's NOTIFY when the job went in due now: one round
    trip."""
    inserted = (
        postgresql.insert(jobs)
        .values({c.name: sa.bindparam(f"b_{c.name}", type_=c.type) for c in _insert_columns()})
        .on_conflict_do_nothing()
        .returning(jobs.c.id, jobs.c.queue, jobs.c.due_at, jobs.c.created_at)
        .cte("inserted")
    )
    due_now = inserted.c.due_at <= inserted.c.created_at
    return sa.select(
        inserted.c.id,
        sa.case((due_now, sa.func.pg_notify(CHANNEL, inserted.c.queue)), else_=None),
    )


class _Announcer:
    """Decides which enqueues wake the workers, so that NOTIFY never throttles enqueueing.

    A NOTIFY takes a database-wide lock when its transaction commits and holds it until the
    commit is on disk, so if every enqueue sent one, concurrent enqueues would commit one at a
    time. Instead, per queue, the first enqueue after a quiet ``NOTIFY_COOLDOWN`` carries the
    NOTIFY in its own transaction (no extra round trip), and enqueues within the cooldown carry
    none. Each of those, once committed, (re)arms a trailing wake-up that fires when the queue
    has had no enqueue for the cooldown: a separate NOTIFY that does not wait for the disk. A
    steady stream therefore sends about one NOTIFY per cooldown, all inside enqueues, and the
    last job of a burst is announced at most a cooldown after its commit. A wake-up that fails to
    send only delays workers until they poll.
    """

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self.cooldown = NOTIFY_COOLDOWN
        self._last: dict[str, float] = {}
        self._trailing: dict[str, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def lead(self, queue: str) -> bool:
        """Whether the enqueue about to run should carry the queue's NOTIFY."""
        now = asyncio.get_running_loop().time()
        if now - self._last.get(queue, -self.cooldown) < self.cooldown:
            return False
        self._last[queue] = now
        return True

    def leading(self, new_jobs: Sequence[NewJob]) -> frozenset[str]:
        """The queues whose NOTIFY an insert of ``new_jobs`` carries: those it brings jobs due
        now, each where this insert is the first in its cooldown."""
        due_now = sorted({j.queue for j in new_jobs if j.due_at <= j.created_at})
        return frozenset(queue for queue in due_now if self.lead(queue))

    def committed(self, queue: str, *, announced: bool) -> None:
        """Jobs due now were committed to ``queue``, with or without a NOTIFY of their own."""
        timer = self._trailing.pop(queue, None)
        if timer is not None:
            timer.cancel()
        if not announced:
            loop = asyncio.get_running_loop()
            self._trailing[queue] = loop.call_later(self.cooldown, self._fire, queue)

    def _fire(self, queue: str) -> None:
        self._trailing.pop(queue, None)
        self._last[queue] = asyncio.get_running_loop().time()
        task = asyncio.create_task(self._send(queue), name=f"caravel-notify-{queue}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, queue: str) -> None:
        try:
            async with self._engine.connect() as conn:
                await conn.execution_options(isolation_level="AUTOCOMMIT")
                await conn.execute(_NOTIFY_ALONE, {"queue": queue})
        except (sa.exc.SQLAlchemyError, OSError) as exc:
            logger.debug(
                "could not send a wake-up; workers will find the job by polling",
                extra={"error_type": type(exc).__name__},
            )

    async def close(self) -> None:
        """Send the wake-ups still waiting, then let them finish."""
        for queue in list(self._trailing):
            self._trailing.pop(queue).cancel()
            self._fire(queue)
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


async def _execute(
    driver: psycopg.AsyncConnection[Any], sql: str, params: dict[str, Any]
) -> list[Any]:
    async with driver.cursor(binary=True) as cursor:
        await cursor.execute(sql, params, prepare=True)
        return await cursor.fetchall()


async def _driver_of(conn: AsyncConnection) -> psycopg.AsyncConnection[Any]:
    raw = await conn.get_raw_connection()
    driver: psycopg.AsyncConnection[Any] = raw.driver_connection  # type: ignore[assignment]
    return driver


def _settle(future: asyncio.Future[None], _: object) -> None:
    if not future.done():
        future.set_result(None)


async def _while_drawing(
    chunks: Iterator[Sequence[NewJob]],
    drawn: list[NewJob],
    send: Callable[[Sequence[NewJob], asyncio.Future[None]], Awaitable[None]],
) -> None:
    """``send`` each chunk to the database, and draw the next chunk from ``chunks`` (validating
    and serializing it: Python's work, on this core) while the server works on the one sent (on
    another core). ``send`` resolves its future once its chunk is on the wire. ``drawn``
    collects every job drawn. A chunk that fails to draw wins over any error of the statement
    still running: the caller must not mistake a bad job for a collision."""

    def draw() -> Sequence[NewJob] | None:
        # Collected as soon as drawn: a chunk drawn while the statement before it fails must
        # not be lost to the caller's retry.
        chunk = next(chunks, None)
        while chunk is not None and not chunk:
            chunk = next(chunks, None)
        if chunk:
            drawn.extend(chunk)
        return chunk

    loop = asyncio.get_running_loop()
    chunk = draw()
    while chunk is not None:
        sent: asyncio.Future[None] = loop.create_future()
        sending = asyncio.ensure_future(send(chunk, sent))
        sending.add_done_callback(functools.partial(_settle, sent))  # failed before sending
        try:
            await sent
            chunk = draw()
        except BaseException:
            # A bad chunk, or the caller cancelled: the statement still running must finish
            # (the connection must be idle before the transaction rolls back), and its own
            # error, if any, is not the one to report.
            await asyncio.gather(sending, return_exceptions=True)
            raise
        await sending


class PostgresStore(SqlStore):
    supports_listen_notify = True
    db_system = "postgresql"
    insert_chunk = 1000
    driver_errors = (psycopg.Error,)

    def __init__(self, engine: AsyncEngine) -> None:
        super().__init__(engine)
        self._announcer = _Announcer(engine)
        #: Pooled connections kept checked out, in autocommit mode, for :meth:`_autocommit`: by
        #: whether they plan with index scans only.
        self._hot: dict[bool, list[Any]] = {False: [], True: []}
        self._closed = False

    def _insert(self) -> Any:
        return postgresql.insert(jobs)

    def _claim_target(self, candidates: sa.Select[Any]) -> sa.ColumnElement[bool]:
        # Lock the picked rows, skipping any another worker holds, and hand their ids over as
        # one array: "id = ANY(array)" is answered from the primary key, whatever the table's
        # size, where a join against the picked set may be planned as a scan of the table.
        picked = candidates.with_for_update(skip_locked=True).subquery("picked")
        ids = sa.select(sa.func.array_agg(picked.c.id)).scalar_subquery()
        return jobs.c.id == sa.any_(sa.cast(ids, ARRAY(sa.Uuid())))

    def _is_schema_missing(self, exc: BaseException) -> bool:
        orig = getattr(exc, "orig", exc)
        return getattr(orig, "sqlstate", None) in _SCHEMA_MISSING

    async def _insert_array(
        self, driver: psycopg.AsyncConnection[Any], new_jobs: Sequence[NewJob]
    ) -> set[UUID]:
        # One statement with one array per column, whatever the batch size: the query text
        # stays short and cached, the server unnests the arrays into rows, and the arrays travel
        # in binary (psycopg's text array format quotes every element, which cost more than the
        # insert itself).
        ids = [j.id for j in new_jobs]
        values = {
            "ids": ids,
            "queues": [j.queue for j in new_jobs],
            "job_types": [j.job_type for j in new_jobs],
            "tenants": [j.tenant_id for j in new_jobs],
            "keys": [j.idempotency_key for j in new_jobs],
            "payloads": [j.payload for j in new_jobs],
            "max_attempts": [j.max_attempts for j in new_jobs],
            "due": [j.due_at for j in new_jobs],
            "created": [j.created_at for j in new_jobs],
            "traces": [j.trace_context for j in new_jobs],
        }
        # No RETURNING: when every row went in (the common case) the row count says so, and
        # returning the ids cost about an eighth of the insert. Otherwise the rows this transaction
        # inserted are told apart by their xmin.
        sql, defaults = self._compiled("insert_unnest", lambda: _INSERT_UNNEST)
        async with driver.cursor(binary=True) as cursor:
            await cursor.execute(sql, {**defaults, **values}, prepare=True)
            if cursor.rowcount == len(new_jobs):
                return set(ids)
        rows = await self._run(driver, "inserted_here", lambda: _INSERTED_HERE, values)
        return {row[0] for row in rows}

    def _compiled(self, name: str, build: Callable[[], Any]) -> tuple[str, dict[str, Any]]:
        """A statement's SQL text and default parameters, compiled once by SQLAlchemy."""

        def compiled() -> tuple[str, dict[str, Any]]:
            statement = build().compile(dialect=self.engine.dialect)
            # Every parameter in binary: for lists of text psycopg would otherwise pick the text
            # array format, which quotes element by element.
            return _BINARY_PLACEHOLDER.sub(r"%(\1)b", str(statement)), dict(statement.params)

        found: tuple[str, dict[str, Any]] = self._statement(f"driver_{name}", compiled)
        return found

    async def _run(
        self,
        driver: psycopg.AsyncConnection[Any],
        name: str,
        build: Callable[[], Any],
        values: dict[str, Any],
    ) -> list[Any]:
        """Run a statement straight on psycopg, compiled once by SQLAlchemy (same text, same
        parameters) and prepared by the server on first use, with parameters and results in
        binary. On the hot paths SQLAlchemy's per-execution work cost about as much as the
        statement itself."""
        sql, defaults = self._compiled(name, build)
        return await _execute(driver, sql, {**defaults, **values})

    @asynccontextmanager
    async def _autocommit(
        self, operation: str, *, index_only: bool = False
    ) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A psycopg connection in autocommit mode, for the one-statement hot paths (a one-job
        enqueue, a claim, an acknowledgement batch): each statement is its own transaction.
        Errors are translated and the deadline holds as on every other operation. With
        ``index_only`` the connection plans without bitmap or sequential scans (see
        ``_INDEX_ONLY``).

        The connection comes from SQLAlchemy's pool, but up to :data:`HOT_CONNECTIONS` of each
        kind stay checked out between uses, already in autocommit: taking one from the pool and
        giving it back cost about as much as all of Caravel's own work in a one-job enqueue. One
        left mid-statement is discarded; a broken one takes the idle ones with it (a server that
        went away took them all)."""
        async with self._translated(operation):
            hot = self._hot[index_only]
            fairy = hot.pop() if hot else await self._check_out(index_only=index_only)
            driver: psycopg.AsyncConnection[Any] = fairy.driver_connection
            loop = asyncio.get_running_loop()
            timer = loop.call_later(self.operation_timeout, self._cut, lambda: driver)
            try:
                yield driver
            finally:
                timer.cancel()
                await self._check_in(fairy, index_only=index_only)

    async def _check_out(self, *, index_only: bool) -> Any:
        fairy = await self.engine.raw_connection()
        try:
            driver: psycopg.AsyncConnection[Any] = fairy.driver_connection  # type: ignore[assignment]
            await driver.set_autocommit(True)
            if index_only:
                await driver.execute(_INDEX_ONLY)
        except BaseException:
            await self._give_back(fairy, index_only=index_only)
            raise
        return fairy

    async def _check_in(self, fairy: Any, *, index_only: bool) -> None:
        driver: psycopg.AsyncConnection[Any] = fairy.driver_connection
        idle = driver.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        hot = self._hot[index_only]
        if idle and not self._closed and len(hot) < HOT_CONNECTIONS:
            hot.append(fairy)
            return
        if driver.broken:
            stale = [*self._hot[False], *self._hot[True]]
            self._hot = {False: [], True: []}
            for other in stale:
                await greenlet_spawn(other.invalidate)
                await greenlet_spawn(other.close)
        await self._give_back(fairy, index_only=index_only)

    @staticmethod
    async def _give_back(fairy: Any, *, index_only: bool) -> None:
        """Return a connection to SQLAlchemy's pool as it lent it, or discard it when it was
        left mid-statement, is broken, or could not be given its default settings back."""
        driver: psycopg.AsyncConnection[Any] = fairy.driver_connection
        reusable = driver.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        if reusable:
            try:
                if index_only:
                    await driver.execute(_DEFAULT_PLANS)
                await driver.set_autocommit(False)
            except psycopg.Error:
                reusable = False
        if not reusable:
            await greenlet_spawn(fairy.invalidate)
        await greenlet_spawn(fairy.close)

    async def job_insert_many(
        self, chunks: Iterable[Sequence[NewJob]], *, total: int
    ) -> InsertResult:
        drawn = iter(chunks)
        strategy = next(name for largest, name in INSERT_STRATEGIES if total <= largest)
        if strategy == "copy":
            done = await self._insert_copy(drawn)
        else:
            new_jobs = [job for chunk in drawn for job in chunk]
            if strategy == "one_row" and len(new_jobs) == 1:
                done = await self._insert_one_row(new_jobs)
            else:
                done = await self._insert_values(new_jobs)
        self._after_commit(done)
        return done.result

    async def _insert_one_row(self, new_jobs: list[NewJob]) -> Inserted:
        """The common one-job enqueue: one cached statement (carrying the NOTIFY when this
        enqueue leads), its own transaction. A job that collided with an existing row goes to
        the VALUES strategy, which looks that row up."""
        (job,) = new_jobs
        leading = self._announcer.leading(new_jobs)
        build = _insert_one_notify_statement if leading else _insert_one_statement
        values = {f"b_{k}": v for k, v in self._row_values(job).items()}
        async with self._autocommit("job_insert") as driver:
            rows = await self._run(driver, build.__name__, build, values)
        if not rows:  # nothing inserted, so no NOTIFY was sent either
            return await self._insert_values(new_jobs)
        return Inserted(InsertResult(new_jobs, [InsertOutcome(job.id, inserted=True)]), leading)

    async def _insert_values(self, new_jobs: list[NewJob]) -> Inserted:
        """A few jobs as VALUES rows in one transaction (one job is one statement, which needs
        none), skipping rows that are already there; then the skipped jobs' rows looked up."""
        if not new_jobs:
            return Inserted(InsertResult([], []))
        async with self._write("job_insert", single=len(new_jobs) == 1) as conn:
            announced = await self._announce(await _driver_of(conn), new_jobs)
            inserted = await self._insert_rows(conn, new_jobs)
            outcomes = await self._outcomes(conn, new_jobs, inserted)
        return Inserted(InsertResult(new_jobs, outcomes), announced)

    async def _insert_copy(self, chunks: Iterator[Sequence[NewJob]]) -> Inserted:
        """Many jobs in one transaction, written by COPY, each chunk while the caller prepares
        the next. COPY is the fastest way into a table, but it cannot skip a row that is already
        there: if any job collides (an existing idempotency key or id, or a key repeated within
        the call), the attempt is rolled back and the call is inserted again by the path that
        skips such rows. A probe of the first job's key and id sends the common collision, a
        whole batch submitted again, straight there."""
        first = next(chunks, None)
        while first is not None and not first:
            first = next(chunks, None)
        if first is None:
            return Inserted(InsertResult([], []))
        drawn: list[NewJob] = []
        try:
            return await self._copy_chunks(first, chunks, drawn)
        except _Collided:
            pending = [] if drawn else first  # what was drawn is in `drawn`
        return await self._insert_arrays(itertools.chain([drawn, pending], chunks))

    async def _seen_before(self, driver: psycopg.AsyncConnection[Any], job: NewJob) -> bool:
        """Whether a row already holds ``job``'s id or idempotency key."""
        values = {
            "id": job.id,
            "queue": job.queue,
            "tenant_id": job.tenant_id,
            "key": job.idempotency_key,
        }
        rows = await self._run(driver, "seen_before", lambda: _SEEN_BEFORE, values)
        return bool(rows[0][0])

    async def _copy_chunks(
        self, first: Sequence[NewJob], chunks: Iterator[Sequence[NewJob]], drawn: list[NewJob]
    ) -> Inserted:
        """COPY the chunks into the table, one COPY each, in one transaction. Raises
        :class:`_Collided` when a row was already there (without trying, when the first job's
        is). ``drawn`` collects the jobs drawn from ``chunks``."""
        async with self._write("job_insert") as conn:
            driver = await _driver_of(conn)
            if await self._seen_before(driver, first[0]):
                raise _Collided

            async def copy_chunk(chunk: Sequence[NewJob], sent: asyncio.Future[None]) -> None:
                # One COPY per chunk: PostgreSQL inserts a binary COPY's rows when it ends (or
                # every 1,000 rows), so separate COPYs let the server work on one chunk while
                # the next is prepared.
                async with driver.cursor() as cursor, cursor.copy(_COPY_SQL) as copy:
                    copy.set_types(_COPY_TYPES)
                    for job in chunk:
                        await copy.write_row(_copy_row(job))
                    sent.set_result(None)

            try:
                await _while_drawing(itertools.chain([first], chunks), drawn, copy_chunk)
            except psycopg.errors.UniqueViolation as exc:
                raise _Collided from exc
            announced = await self._announce(driver, drawn)
        outcomes = [InsertOutcome(job.id, inserted=True) for job in drawn]
        return Inserted(InsertResult(drawn, outcomes), announced)

    async def _insert_arrays(self, chunks: Iterator[Sequence[NewJob]]) -> Inserted:
        """Insert the chunks in one transaction, skipping rows that are already there, each
        chunk while the caller prepares the next; then look the skipped jobs' rows up."""
        new_jobs: list[NewJob] = []
        async with self._write("job_insert") as conn:
            driver = await _driver_of(conn)
            inserted: set[UUID] = set()

            async def insert_chunk(chunk: Sequence[NewJob], sent: asyncio.Future[None]) -> None:
                sent.set_result(None)  # the statement is on its way once this task waits
                inserted.update(await self._insert_array(driver, chunk))

            await _while_drawing(chunks, new_jobs, insert_chunk)
            announced = await self._announce(driver, new_jobs)
            outcomes = await self._outcomes(conn, new_jobs, inserted)
        return Inserted(InsertResult(new_jobs, outcomes), announced)

    async def _announce(
        self, driver: psycopg.AsyncConnection[Any], new_jobs: Sequence[NewJob]
    ) -> frozenset[str]:
        """NOTIFY, in the insert's transaction, the queues this insert leads (see
        :class:`_Announcer`); PostgreSQL delivers them when it commits."""
        leading = self._announcer.leading(new_jobs)
        for queue in sorted(leading):
            await self._run(driver, "notify", lambda: _NOTIFY, {"queue": queue})
        return leading

    async def job_claim_many(self, request: ClaimRequest) -> ClaimBatch:
        source, limit = request.source, request.limit
        values = self._claim_params(request, request.now)
        del values["b_limit"]  # written into the statement's text instead
        # The batch size is written into the statement (one prepared statement per size), so
        # the planner always knows how few rows the claim reads.
        sql, defaults = self._compiled(
            f"claim_{source}", lambda: self._claim_statement(source, literal_limit=False)
        )
        sql = sql.replace("%(b_limit)b", str(int(limit)))
        async with self._autocommit("job_claim", index_only=True) as driver:
            rows = await _execute(driver, sql, {**defaults, **values})
        return claimed_from_rows(rows)

    def _complete_statement(self) -> sa.Update:
        # Sent as one autocommit statement, so the commit's durability is set inside it: the
        # acknowledgement's commit returns before it reaches disk. If the database server itself
        # crashes in that window the acknowledgement is lost and the job runs again after its
        # lease expires (at-least-once allows that). Claims and enqueues stay fully durable.
        relaxed = sa.select(sa.func.set_config("synchronous_commit", "off", True))
        return super()._complete_statement().where(relaxed.scalar_subquery().is_not(None))

    async def job_complete_many(self, leases: Sequence[Lease], now: int) -> set[UUID]:
        if not leases:
            return set()
        values = {**self._held_params(leases), "b_now": now}
        async with self._autocommit("job_complete", index_only=True) as driver:
            rows = await self._run(driver, "complete", self._complete_statement, values)
        return {row[0] for row in rows}

    def _after_commit(self, done: Inserted) -> None:
        """Once a call's jobs are committed: each queue that received jobs due now is
        announced, by a trailing wake-up unless the call's own transaction carried its NOTIFY
        (delayed jobs are left to polling)."""
        new_jobs, outcomes = done.result
        due_now = {
            job.queue
            for job, outcome in zip(new_jobs, outcomes, strict=True)
            if outcome.inserted and job.due_at <= job.created_at
        }
        for queue in sorted(due_now):
            self._announcer.committed(queue, announced=queue in done.announced)

    async def close(self) -> None:
        if self.closed:
            return
        await self._announcer.close()
        self._closed = True
        hot, self._hot = self._hot, {False: [], True: []}
        for index_only, fairies in hot.items():
            for fairy in fairies:
                await self._give_back(fairy, index_only=index_only)
        await super().close()

    def wakeups(self, queues: Sequence[str]) -> AsyncIterator[str]:
        return self._listen(frozenset(queues))

    async def _listen(self, queues: frozenset[str]) -> AsyncIterator[str]:
        """Queue names from NOTIFY, over a dedicated connection outside the pool. A lost
        connection is re-opened after a pause; polling covers the gap."""
        dsn = self.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    dsn, autocommit=True, **CONNECT_ARGS
                ) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    async for note in conn.notifies():
                        if note.payload in queues:
                            yield note.payload
            except psycopg.Error as exc:
                logger.warning(
                    "wake-up listener lost its connection; polling until it is back",
                    extra={"error_type": type(exc).__name__},
                )
            await asyncio.sleep(LISTEN_RETRY_SECONDS)

    def _sever(self, conn: AsyncConnection) -> None:
        self._cut(lambda: conn.sync_connection.connection.driver_connection)  # type: ignore[union-attr]

    @staticmethod
    def _cut(driver: Callable[[], Any]) -> None:
        """Shut the socket of ``driver()`` down (without closing the descriptor under the event
        loop): whatever is waiting on it gets end-of-file at once and fails as a lost
        connection. Runs from a timer, so it never raises."""
        try:
            fd = driver().pgconn.socket
            with socket.fromfd(fd, socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.shutdown(socket.SHUT_RDWR)
        except Exception:  # already closed, or not a socket: nothing to cut
            logger.debug("could not cut a stuck connection")
        else:
            logger.warning("a database operation exceeded its deadline; its connection was cut")

    def _held_clause(self) -> sa.ColumnElement[bool]:
        # Two arrays instead of one placeholder pair per lease: the statement text is the same
        # for every batch size, so the server prepares it once.
        # The statement joins the jobs to the unnested pairs (UPDATE ... FROM), so the pairs
        # drive it: one primary-key probe per lease. The server reuses a generic plan for a
        # prepared statement, and for that plan it cannot know how many pairs there are; written
        # as ``(id, token) IN (SELECT ... unnest(...))`` it chose to re-scan the pairs for every
        # row, which cost 150 ms for a batch of 1,000 instead of 10.
        ids = sa.bindparam("b_ids", type_=ARRAY(sa.Uuid()))
        tokens = sa.bindparam("b_tokens", type_=ARRAY(sa.BigInteger()))
        held = sa.func.unnest(ids, tokens).table_valued("id", "token").render_derived("held")
        return sa.and_(
            jobs.c.id == held.c.id,
            jobs.c.lease_token == held.c.token,
            jobs.c.state == "running",
        )

    def _held_params(self, leases: Sequence[Lease]) -> dict[str, Any]:
        return {
            "b_ids": [lease.job_id for lease in leases],
            "b_tokens": [lease.token for lease in leases],
        }

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
                # Acknowledgements only. The commit returns before it reaches disk; if the
                # database server itself crashes in that window, the acknowledgement is lost and
                # the job runs again after its lease expires (at-least-once allows that). Claims
                # and enqueues stay fully durable.
                await conn.exec_driver_sql("SET LOCAL synchronous_commit TO OFF")
            yield conn
