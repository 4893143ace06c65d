"""Inserting jobs on PostgreSQL: one operation, whose strategy the table below picks by the
number of jobs the caller says it brings."""

from __future__ import annotations

import asyncio
import functools
import itertools
import operator
import sys
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Sequence
from typing import Any, Literal, NamedTuple
from uuid import UUID

import psycopg
from sqlalchemy.ext.asyncio import AsyncEngine

from caravel.store.plans import run_plan
from caravel.store.postgresql.connections import ConnectedStore, driver_of
from caravel.store.postgresql.insert_statements import (
    COPY_SQL,
    COPY_TYPES,
    INSERT_ONE,
    INSERT_ONE_NOTIFY,
    INSERT_UNNEST,
    INSERTED_HERE,
    SEEN_BEFORE,
    copy_rows,
    one_row_values,
    unnest_values,
)
from caravel.store.postgresql.notifications import NOTIFY, Announcer
from caravel.store.protocol import AllInserted, InsertOutcome, InsertResult, NewJob

__all__ = ["INSERT_STRATEGIES", "Inserted", "InsertingStore"]

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


def _strategy_for(total: int) -> InsertStrategy:
    for largest, strategy in INSERT_STRATEGIES:
        if total <= largest:
            return strategy
    raise AssertionError("the last strategy takes any total")  # pragma: no cover


class Inserted(NamedTuple):
    """What one insert strategy did: the call's result, and the queues whose NOTIFY its
    transaction carried (PostgreSQL delivers them when it commits)."""

    result: InsertResult
    announced: frozenset[str] = frozenset()


class _Collided(Exception):
    """A COPY met a row that was already there; the call goes to the path that skips rows."""


class _Keyed(Exception):
    """A bulk path met a job with a pending key, which neither COPY nor an unnested insert can
    settle; the call goes to the path that settles each such job against its pending one."""


_PENDING_KEY = operator.attrgetter("pending_key")
_QUEUE_DUE_CREATED = operator.attrgetter("queue", "due_at", "created_at")


def _check_unkeyed(chunk: Sequence[NewJob]) -> None:
    # No Python call per job: a COPY's chunks have no pending key but are all checked.
    if any(map(operator.is_not, map(_PENDING_KEY, chunk), itertools.repeat(None))):
        raise _Keyed


class _Recording(Iterator[Sequence[NewJob]]):
    """The caller's chunks, each kept as it is drawn, so a call that has to start again on
    another path can have every job back."""

    def __init__(self, chunks: Iterator[Sequence[NewJob]]) -> None:
        self._chunks = chunks
        self._drawn: list[Sequence[NewJob]] = []

    def __next__(self) -> Sequence[NewJob]:
        chunk = next(self._chunks)
        self._drawn.append(chunk)
        return chunk

    def everything(self) -> list[NewJob]:
        """Every job drawn so far and every one still to draw, in order."""
        for _ in self:
            pass
        return [job for chunk in self._drawn for job in chunk]


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


class InsertingStore(ConnectedStore):
    """The PostgreSQL store's insert operation, and the wake-ups its commits announce."""

    def __init__(self, engine: AsyncEngine) -> None:
        super().__init__(engine)
        options = self._options
        # Without wake-ups, workers poll: nothing to LISTEN to, nothing worth a NOTIFY.
        self.supports_listen_notify = options.wakeups
        self._announcer = Announcer(engine, enabled=options.wakeups)
        if options.notify_window is not None:
            self._announcer.cooldown = options.notify_window

    async def job_insert_many(
        self, chunks: Iterable[Sequence[NewJob]], *, total: int
    ) -> InsertResult:
        drawn = iter(chunks)
        strategy = _strategy_for(total)
        if strategy == "copy":
            recording = _Recording(drawn)
            try:
                done = await self._insert_copy(recording)
            except _Keyed:  # rolled back: the whole call goes the way that settles keys
                done = await self._insert_values(recording.everything())
        else:
            new_jobs = [job for chunk in drawn for job in chunk]
            if any(job.pending_key is not None for job in new_jobs):
                done = await self._insert_values(new_jobs)  # settled one by one
            elif strategy == "one_row" and len(new_jobs) == 1:
                done = await self._insert_one_row(new_jobs)
            else:
                done = await self._insert_values(new_jobs)
        self._after_commit(done)
        return done.result

    def job_insert_blocking(self, new_job: NewJob, loop: asyncio.AbstractEventLoop) -> InsertResult:
        # The one_row strategy on the caller's thread, over a blocking connection; anything
        # else is settled on the loop, as job_insert_many settles it.
        if new_job.pending_key is None:
            with self._blocking_use("job_insert", loop) as cursor:
                if cursor is not None:
                    leading = self._announcer.leading([new_job])
                    sql = INSERT_ONE_NOTIFY if leading else INSERT_ONE
                    cursor.execute(sql, one_row_values(new_job), prepare=True)
                    inserted = cursor.rowcount == 1
            if cursor is None:  # every blocking connection is in use: the loop's pool queues it
                return self._on_loop(loop, self.job_insert_many([[new_job]], total=1))
            if inserted:
                outcome = InsertOutcome(new_job.id, inserted=True)
                done = Inserted(InsertResult([new_job], [outcome]), leading)
                self._after_commit(done, loop)
                return done.result
        return self._on_loop(loop, self._insert_settled([new_job]))

    @staticmethod
    def _on_loop(
        loop: asyncio.AbstractEventLoop, work: Coroutine[Any, Any, InsertResult]
    ) -> InsertResult:
        return asyncio.run_coroutine_threadsafe(work, loop).result()

    async def _insert_settled(self, new_jobs: list[NewJob]) -> InsertResult:
        """The VALUES strategy, which settles every job against the row that kept it out."""
        done = await self._insert_values(new_jobs)
        self._after_commit(done)
        return done.result

    async def _insert_one_row(self, new_jobs: list[NewJob]) -> Inserted:
        """The common one-job enqueue: one prepared statement whose parameters are the job's
        own fields (carrying the NOTIFY when this enqueue leads), its own transaction. A job
        that collided with an existing row goes to the VALUES strategy, which looks that row
        up."""
        (job,) = new_jobs
        leading = self._announcer.leading(new_jobs)
        use = self._autocommit("job_insert")
        async with use:
            cursor = use.cursor()
            sql = INSERT_ONE_NOTIFY if leading else INSERT_ONE
            await cursor.execute(sql, one_row_values(job), prepare=True)
            inserted = cursor.rowcount == 1
        if not inserted:  # nothing inserted, so no NOTIFY was sent either
            return await self._insert_values(new_jobs)
        return Inserted(InsertResult(new_jobs, [InsertOutcome(job.id, inserted=True)]), leading)

    async def _insert_values(self, new_jobs: list[NewJob]) -> Inserted:
        """A few jobs as VALUES rows in one transaction (one job is one statement, which needs
        none), skipping rows that are already there; then the skipped jobs' rows looked up."""
        if not new_jobs:
            return Inserted(InsertResult([], []))
        async with self._write("job_insert", single=len(new_jobs) == 1) as conn:
            announced = await self._announce(await driver_of(conn), new_jobs)
            outcomes = await run_plan(conn.execute, self._settle_plan(new_jobs))
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
        rows = await self._run(driver, "seen_before", lambda: SEEN_BEFORE, values)
        return bool(rows[0][0])

    async def _copy_chunks(
        self, first: Sequence[NewJob], chunks: Iterator[Sequence[NewJob]], drawn: list[NewJob]
    ) -> Inserted:
        """COPY the chunks into the table, one COPY each, in one transaction. Raises
        :class:`_Collided` when a row was already there (without trying, when the first job's
        is). ``drawn`` collects the jobs drawn from ``chunks``."""
        async with self._write("job_insert") as conn:
            driver = await driver_of(conn)
            if await self._seen_before(driver, first[0]):
                raise _Collided

            async def copy_chunk(chunk: Sequence[NewJob], sent: asyncio.Future[None]) -> None:
                _check_unkeyed(chunk)
                # One COPY per chunk: PostgreSQL inserts a binary COPY's rows when it ends (or
                # every 1,000 rows), so separate COPYs let the server work on one chunk while
                # the next is prepared.
                async with driver.cursor() as cursor, cursor.copy(COPY_SQL) as copy:
                    copy.set_types(COPY_TYPES)
                    for row in copy_rows(chunk):
                        await copy.write_row(row)
                    sent.set_result(None)

            try:
                await _while_drawing(itertools.chain([first], chunks), drawn, copy_chunk)
            except psycopg.errors.UniqueViolation as exc:
                raise _Collided from exc
            announced = await self._announce(driver, drawn)
        return Inserted(InsertResult(drawn, AllInserted(drawn)), announced)

    async def _insert_arrays(self, chunks: Iterator[Sequence[NewJob]]) -> Inserted:
        """Insert the chunks in one transaction, skipping rows that are already there, each
        chunk while the caller prepares the next; then look the skipped jobs' rows up."""
        new_jobs: list[NewJob] = []
        async with self._write("job_insert") as conn:
            driver = await driver_of(conn)
            inserted: set[UUID] = set()

            async def insert_chunk(chunk: Sequence[NewJob], sent: asyncio.Future[None]) -> None:
                _check_unkeyed(chunk)
                sent.set_result(None)  # the statement is on its way once this task waits
                inserted.update(await self._insert_array(driver, chunk))

            await _while_drawing(chunks, new_jobs, insert_chunk)
            announced = await self._announce(driver, new_jobs)
            outcomes = await self._outcomes(conn, new_jobs, inserted)
        return Inserted(InsertResult(new_jobs, outcomes), announced)

    async def _insert_array(
        self, driver: psycopg.AsyncConnection[Any], new_jobs: Sequence[NewJob]
    ) -> set[UUID]:
        # One statement with one array per column, whatever the batch size: the query text
        # stays short and cached, the server unnests the arrays into rows, and the arrays travel
        # in binary (psycopg's text array format quotes every element, which cost more than the
        # insert itself).
        values = unnest_values(new_jobs)
        # No RETURNING: when every row went in (the common case) the row count says so, and
        # returning the ids would slow every insert down. Otherwise the rows this transaction
        # inserted are told apart by their xmin.
        sql, defaults = self._compiled("insert_unnest", lambda: INSERT_UNNEST)
        async with driver.cursor(binary=True) as cursor:
            await cursor.execute(sql, {**defaults, **values}, prepare=True)
            if cursor.rowcount == len(new_jobs):
                return set(values["ids"])
        rows = await self._run(driver, "inserted_here", lambda: INSERTED_HERE, values)
        return {row[0] for row in rows}

    async def _announce(
        self, driver: psycopg.AsyncConnection[Any], new_jobs: Sequence[NewJob]
    ) -> frozenset[str]:
        """NOTIFY, in the insert's transaction, the queues this insert leads (see
        :class:`Announcer`); PostgreSQL delivers them when it commits."""
        leading = self._announcer.leading(new_jobs)
        for queue in sorted(leading):
            await self._run(driver, "notify", lambda: NOTIFY, {"queue": queue})
        return leading

    def _after_commit(self, done: Inserted, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Once a call's jobs are committed: each queue that received jobs due now is
        announced, by a trailing wake-up unless the call's own transaction carried its NOTIFY
        (delayed jobs are left to polling). ``loop``: the store's event loop, when called from
        another thread."""
        new_jobs, outcomes = done.result
        if isinstance(outcomes, AllInserted):  # the bulk path's: no outcome per job to read
            due_now = {q for q, due, created in map(_QUEUE_DUE_CREATED, new_jobs) if due <= created}
        else:
            due_now = {
                job.queue
                for job, outcome in zip(new_jobs, outcomes, strict=True)
                if (outcome.inserted or outcome.replaced) and job.due_at <= job.created_at
            }
        for queue in sorted(due_now):
            self._announcer.committed(queue, announced=queue in done.announced, loop=loop)

    async def close(self) -> None:
        if self.closed:
            return
        await self._announcer.close()  # the wake-ups still waiting go out first
        await super().close()
