"""The SQLite store: every operation on a thread of its own, one write transaction at a time."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from caravel.errors import DatabaseNotFoundError, StoreError
from caravel.jobs import Lease
from caravel.store.base import SqlStore, claimed_from_rows
from caravel.store.plans import run_plan_sync
from caravel.store.protocol import (
    ClaimBatch,
    ClaimRequest,
    InsertOutcome,
    InsertResult,
    NewJob,
    Recorder,
)
from caravel.store.rows import job_row_columns
from caravel.store.schema import FINISHED_COUNTS_TABLE, jobs
from caravel.store.schema import queue_limits as queue_limits_table
from caravel.store.schema import queues as queues_table
from caravel.store.schema import schedules as schedules_table
from caravel.store.sqlite.connections import (
    LOCK_WAIT_NOTED_MS,
    CallerWrites,
    T,
    ThreadConnection,
    _begin,
    _blocking_engine,
    _finish_write,
    _Parameters,
    _pass_on,
)
from caravel.store.sqlite.notifications import Announcer, folder_for, listen

__all__ = ["SqliteStore"]

_FINISHED_COUNT = sa.text(
    f"SELECT jobs FROM {FINISHED_COUNTS_TABLE} WHERE queue = :queue AND state = :state"
)


_MAIN_FILE = sa.text("SELECT file FROM pragma_database_list WHERE name = 'main'").columns(
    file=sa.String
)


class SqliteStore(SqlStore[ThreadConnection]):
    """Every operation runs on a thread of this store, on connections of one blocking engine:
    writes on the writer thread, reads on the reader thread (in WAL mode readers never wait for
    the writer). The hot writes (a one-job enqueue, a claim, an acknowledgement batch) hand their
    whole transaction over at once, where the shared operations hand over each statement (see
    :class:`ThreadConnection`); the one-job enqueue runs on the pooled connection's own sqlite3
    connection. An asyncio lock keeps one write transaction at a time, so that our own writes
    never queue on SQLite's lock.

    The async engine the store is given names the file; the store runs none of its own
    statements on it. Enqueues of jobs due now wake workers in other processes through the
    sockets of :mod:`~caravel.store.sqlite.notifications`, where the platform has them."""

    db_system = "sqlite"
    insert_chunk = 200
    # Raised by the one-job insert, which runs on the driver's own connection.
    driver_errors = (sqlite3.Error,)
    # Exact, kept by the triggers of migration 0005: the counts read one row per queue and
    # state instead of a bounded stretch of the finished index.
    _kept_counts = sa.table(
        FINISHED_COUNTS_TABLE, sa.column("queue"), sa.column("state"), sa.column("jobs")
    )

    def __init__(self, engine: AsyncEngine) -> None:
        super().__init__(engine)
        self._writer = asyncio.Lock()
        self._writes = ThreadPoolExecutor(max_workers=1, thread_name_prefix="caravel-sqlite")
        self._reads = ThreadPoolExecutor(max_workers=1, thread_name_prefix="caravel-sqlite-read")
        # The executors that were handed work, and so have their thread (each starts it then).
        self._started: set[ThreadPoolExecutor] = set()
        self._blocking = _blocking_engine(engine)
        # The sync facade's one-job enqueue runs on its caller's thread, on a connection of its
        # own (job_insert_blocking).
        self._callers = CallerWrites(_blocking_engine(engine, pooled=False))
        file = self._file()
        folder = None if file is None else folder_for(file)
        self._announcer = None if folder is None else Announcer(folder)
        self.supports_listen_notify = self._announcer is not None

    async def _finished_estimate(self, conn: ThreadConnection, queue: str, state: str) -> int:
        # Exact, and one row read: the triggers of migration 0005 keep the count in the same
        # transaction as every change to the jobs table.
        found = (await conn.execute(_FINISHED_COUNT, {"queue": queue, "state": state})).scalar()
        if found is None:
            return await super()._finished_estimate(conn, queue, state)
        return int(found)

    async def _on(self, thread: ThreadPoolExecutor, work: Callable[[], T]) -> T:
        """``work()`` on ``thread``. A caller cancelled meanwhile stops waiting, but the work
        still runs, in order with what was handed over before and after it: the end of a
        transaction handed over later always follows its statements."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[T] = loop.create_future()

        def settle(done: Future[T]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(_pass_on, done, waiter)

        try:
            submitted = thread.submit(work)
        except RuntimeError:  # the store was closed: an error of the database's kind
            raise sqlite3.ProgrammingError("the queue's SQLite store is closed") from None
        self._started.add(thread)
        submitted.add_done_callback(settle)
        return await waiter

    def _on_writer(self, work: Callable[[], T]) -> Awaitable[T]:
        return self._on(self._writes, work)

    def _on_reader(self, work: Callable[[], T]) -> Awaitable[T]:
        return self._on(self._reads, work)

    async def _in_writer(
        self, operation: str, work: Callable[[sa.Connection, int], T], *, durable: bool = True
    ) -> T:
        """``work(connection, waited_ms)`` inside one ``BEGIN IMMEDIATE`` transaction on the
        writer thread. ``waited_ms`` is how long the transaction waited for the write lock (the
        asyncio lock and SQLite's own, not opening a connection) when that was long enough to
        matter, else 0. ``durable`` as for :func:`_begin`."""
        asked = time.monotonic()
        async with self._translated(operation), self._writer:
            queued = time.monotonic() - asked

            def run() -> T:
                conn = self._blocking.connect()
                try:
                    began = time.monotonic()
                    _begin(conn, durable=durable)
                    waited = int((queued + time.monotonic() - began) * 1000)
                    result = work(conn, waited if waited >= LOCK_WAIT_NOTED_MS else 0)
                except BaseException:
                    with contextlib.suppress(Exception):  # the first error is the one to report
                        _finish_write(conn, commit=False, durable=durable)
                    raise
                _finish_write(conn, commit=True, durable=durable)
                return result

            return await self._on_writer(run)

    async def _in_writer_raw(self, operation: str, work: Callable[[sqlite3.Connection], T]) -> T:
        """``work(connection)`` inside one ``BEGIN IMMEDIATE`` transaction on the writer thread,
        on the pooled connection's own sqlite3 connection: SQLAlchemy's transaction and execution
        work would cost about as much as the insert and its commit together. A connection that
        failed mid-transaction is discarded, which also rolls its transaction back."""

        def run() -> T:
            pooled = self._blocking.raw_connection()
            try:
                driver: sqlite3.Connection = pooled.driver_connection  # type: ignore[assignment]
                driver.execute("BEGIN IMMEDIATE")
                result = work(driver)
                driver.execute("COMMIT")
            except BaseException:
                pooled.invalidate()
                raise
            finally:
                pooled.close()
            return result

        async with self._translated(operation), self._writer:
            return await self._on_writer(run)

    def _raw_insert(self) -> tuple[str, _Parameters]:
        """The one-job insert's SQL text (compiled once by SQLAlchemy, so it is the statement
        the other paths run) and a function from a job to its positional parameters, converted
        as SQLAlchemy would convert them (ids to the column's text form)."""

        def build() -> tuple[str, _Parameters]:
            dialect = self._blocking.dialect
            # Only the columns a new job's row names: the others keep their defaults.
            keys = list(job_row_columns())
            compiled = self._insert_statement().compile(dialect=dialect, column_keys=keys)
            names = list(compiled.positiontup or ())
            defaults = compiled.params
            converters = [compiled.binds[name].type.bind_processor(dialect) for name in names]

            def parameters(job: NewJob) -> tuple[Any, ...]:
                values = {**defaults, **self._row_values(job)}
                return tuple(
                    values[name] if convert is None else convert(values[name])
                    for name, convert in zip(names, converters, strict=True)
                )

            return str(compiled), parameters

        found: tuple[str, _Parameters] = self._statement("raw_insert", build)
        return found

    async def job_insert_many(
        self, chunks: Iterable[Sequence[NewJob]], *, total: int
    ) -> InsertResult:
        new_jobs = [job for chunk in chunks for job in chunk]
        return self._announced(await self._insert_committed(new_jobs))

    def job_insert_blocking(self, new_job: NewJob, loop: asyncio.AbstractEventLoop) -> InsertResult:
        # The one-job insert on the caller's thread, on a connection kept for callers; anything
        # else is settled on the loop, by the general path.
        if new_job.pending_key is None:
            sql, parameters = self._raw_insert()
            values = parameters(new_job)
            with self._translated("job_insert"):
                row = self._callers.run(lambda d: d.execute(sql, values).fetchone())
            if row is not None:
                outcome = InsertOutcome(new_job.id, inserted=True)
                return self._announced(InsertResult([new_job], [outcome]))

        async def settle() -> InsertResult:
            return self._announced(InsertResult([new_job], await self._insert_general([new_job])))

        return asyncio.run_coroutine_threadsafe(settle(), loop).result()

    def _announced(self, result: InsertResult) -> InsertResult:
        """``result``, once the queues it brought jobs due now are announced to other
        processes."""
        if self._announcer is not None:
            outcomes = zip(result.jobs, result.outcomes, strict=True)
            due = {
                j.queue
                for j, o in outcomes
                if (o.inserted or o.replaced) and j.due_at <= j.created_at
            }
            if due:
                self._announcer.announce(due)
        return result

    async def _insert_committed(self, new_jobs: list[NewJob]) -> InsertResult:
        if len(new_jobs) == 1 and new_jobs[0].pending_key is None:
            job = new_jobs[0]
            sql, parameters = self._raw_insert()
            values = parameters(job)
            row = await self._in_writer_raw(
                "job_insert", lambda driver: driver.execute(sql, values).fetchone()
            )
            if row is not None:
                return InsertResult(new_jobs, [InsertOutcome(job.id, inserted=True)])
        # Several jobs, one with a pending key, or one that collided with an existing row: the
        # general path inserts in one transaction and settles each with the row that kept it
        # out.
        return InsertResult(new_jobs, await self._insert_general(new_jobs))

    async def job_claim_many(self, request: ClaimRequest) -> ClaimBatch:
        def claim(conn: sa.Connection, waited: int) -> list[Any]:
            # Open connections keep working on a file unlinked under them, so a worker would
            # poll a deleted queue for ever: the claim, which every worker runs, looks first.
            missing = self._explain("job_claim")
            if missing is not None:
                raise missing
            # Where the claim had to wait for the write lock, the lease starts after the wait.
            # (The write lock also makes the queue's limited claims take turns.)
            params = self._claim_params(request, request.now + waited)
            return run_plan_sync(conn.execute, self._claim_plan(request, params))

        return claimed_from_rows(await self._in_writer("job_claim", claim))

    async def job_complete_many(
        self,
        leases: Sequence[Lease],
        now: int,
        *,
        durable: bool = False,
        results: Mapping[UUID, str] | None = None,
        recorder: Recorder | None = None,
    ) -> set[UUID]:
        if not leases:
            return set()

        def complete(conn: sa.Connection, _: int) -> set[UUID]:
            plan = self._complete_plan(leases, now, results, recorder)
            return run_plan_sync(conn.execute, plan)

        return await self._in_writer("job_complete", complete, durable=durable)

    async def close(self) -> None:
        if self.closed:
            return
        # Only a thread that was started can have work left to finish. One never started is not
        # started now: closing at interpreter exit (a SyncQueue left open) runs where Python
        # 3.12 refuses to start a thread.
        if self._reads in self._started:
            await self._on_reader(lambda: None)  # the reads handed over before finish first
        if self._writes in self._started:
            await self._on_writer(self._blocking.dispose)
        else:  # no write ever ran; the reader's connections may be closed from any thread
            self._blocking.dispose()
        self._writes.shutdown(wait=False)
        self._reads.shutdown(wait=False)
        self._callers.close()
        if self._announcer is not None:
            self._announcer.close()
        await super().close()

    def _insert(self) -> Any:
        return sqlite.insert(jobs)

    def _queues_insert(self) -> Any:
        return sqlite.insert(queues_table)

    def _schedules_insert(self) -> Any:
        return sqlite.insert(schedules_table)

    def _queue_limits_insert(self) -> Any:
        return sqlite.insert(queue_limits_table)

    def wakeups(self, queues: Sequence[str]) -> AsyncIterator[str] | None:
        if self._announcer is None:
            return None
        return listen(self._announcer.folder, frozenset(queues))

    def _identity_statement(self) -> Any:
        return _MAIN_FILE

    def _identity_of(self, rows: list[Any]) -> str:
        # The main database's file, as SQLite resolved it (empty for a memory database).
        file = str(rows[0][0]) if rows and rows[0][0] else ""
        return os.path.realpath(file) if file else ""

    async def database_identity(self) -> str:
        # The URL's file, without a connection: the queue's first connection may need the
        # file to itself (to switch it to WAL), which a caller's open write transaction holds.
        return self._identity_of([(self._file(),)])

    def _announce_committed(self, queues: set[str]) -> None:
        if self._announcer is not None:
            self._announcer.announce(queues)

    def _file(self) -> str | None:
        """The absolute path of the database file, for a URL that names one."""
        path = (self.engine.url.database or "").removeprefix("file:")
        return None if not path or path == ":memory:" else os.path.abspath(path)

    def _explain(self, operation: str) -> StoreError | None:
        path = self._file()
        if path is not None and not os.path.exists(path):
            return DatabaseNotFoundError(operation, path)
        return None

    async def schema_revision(self) -> str | None:
        # A missing file is a wrong URL, not an unmigrated queue: `caravel db upgrade` would
        # create an empty database there.
        path = self._file()
        if path is not None and not await asyncio.to_thread(os.path.exists, path):
            raise DatabaseNotFoundError("schema_revision", path)
        return await super().schema_revision()

    def _is_schema_missing(self, exc: BaseException) -> bool:
        text = str(getattr(exc, "orig", exc))
        return "no such table" in text or "no such column" in text

    @asynccontextmanager
    async def _transaction(
        self, *, readonly: bool, durable: bool = True, single: bool = False
    ) -> AsyncIterator[ThreadConnection]:
        if readonly:
            yield ThreadConnection(self._on_reader, self._blocking, read=True)
            return
        async with self._writer:
            conn = ThreadConnection(self._on_writer, self._blocking, read=False, durable=durable)
            try:
                yield conn
            except BaseException:
                with contextlib.suppress(Exception):  # the first error is the one to report
                    await conn.end(commit=False)
                raise
            await conn.end(commit=True)
