"""``QueueWorker.run_once`` on every database: handlers, scopes, failures, leases and secrecy.

Background handlers are coordinated with asyncio events and a :class:`ManualClock` the tests move
by hand; nothing waits for wall time to pass.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sqlite3
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from caravel import (
    DatabaseQueue,
    JobContext,
    JobRegistry,
    JobState,
    Leases,
    QueueOptions,
    QueueWorker,
    SchemaNotReadyError,
    StoreError,
    WorkerOptions,
)
from caravel.clock import from_ms
from caravel.store.schema import jobs
from caravel.testing import ManualClock, drain
from tests.support import (
    LEASE,
    WAIT,
    Add,
    NeverFinishes,
    Report,
    SteppingClock,
    dispatch,
    engine_of,
    noop,
    open_queue,
    registry_for,
    status_of,
    until_watching,
    within,
)
from tests.support.databases import SqliteTemplate, pg_database

T = TypeVar("T")

LEASE_MS = 30_000
T0 = ManualClock().now_ms()


# ----- claiming -----------------------------------------------------------------------------


async def test_run_once_returns_false_when_nothing_is_due(db_url: str) -> None:
    clock = ManualClock()
    ran: list[int] = []

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        ran.append(job.amount)

    async with (
        open_queue(db_url, registry_for(handle), clock=clock) as queue,
        QueueWorker(queue) as worker,
    ):
        assert await worker.run_once("default") is False
        await queue.enqueue(Add(1), dispatch(queue="other"))
        await queue.enqueue(Add(2), dispatch(not_before=from_ms(T0 + 60_000)))
        assert await worker.run_once("default") is False
        assert ran == []

        await clock.advance(timedelta(minutes=1))
        assert await worker.run_once("default") is True
        assert ran == [2]
        assert await worker.run_once("default") is False


async def test_run_once_returns_true_even_when_the_handler_fails(db_url: str) -> None:
    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        raise ValueError("no")

    async with open_queue(db_url, registry_for(handle)) as queue, QueueWorker(queue) as worker:
        job = await queue.enqueue(Add(1), dispatch())
        assert await worker.run_once("default") is True
        assert (await status_of(queue, job.job_id)).last_failure == "HandlerFailed"


async def test_run_once_skips_expired_dead_letters_to_the_waiting_job(db_url: str) -> None:
    clock = ManualClock()
    ran: list[int] = []

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        ran.append(job.amount)

    async with open_queue(db_url, registry_for(handle), clock=clock, max_attempts=1) as queue:
        abandoned = await queue.enqueue(Add(1), dispatch())
        assert await Leases(queue).claim("default") is not None  # a worker that then vanished
        await clock.advance(LEASE + timedelta(milliseconds=1))
        waiting = await queue.enqueue(Add(2), dispatch())

        async with QueueWorker(queue) as worker:
            assert await worker.run_once("default") is True

        assert ran == [2]
        assert (await status_of(queue, waiting.job_id)).state is JobState.COMPLETED
        dead = await status_of(queue, abandoned.job_id)
        assert dead.state is JobState.DEAD_LETTER
        assert dead.last_failure == "LeaseExpired"


# ----- handlers and context -----------------------------------------------------------------


async def test_async_and_sync_handlers_run_with_the_job_context(db_url: str) -> None:
    contexts: list[tuple[str, JobContext[Any], str]] = []

    async def handle_add(job: Add, ctx: JobContext[Any]) -> None:
        contexts.append(("add", ctx, threading.current_thread().name))

    def handle_report(job: Report, ctx: JobContext[Any]) -> None:
        contexts.append(("report", ctx, threading.current_thread().name))

    clock = ManualClock()
    registry = registry_for(handle_add, handle_report)
    async with open_queue(db_url, registry, clock=clock) as queue, QueueWorker(queue) as worker:
        add = await queue.enqueue(Add(1), dispatch(queue="mail", tenant="tenant-b", max_attempts=4))
        await clock.advance(timedelta(milliseconds=1))
        report = await queue.enqueue(Report(report_id="r"), dispatch(queue="mail", tenant="T-c"))

        assert await worker.run_once("mail") is True
        assert await worker.run_once("mail") is True
        assert await worker.run_once("mail") is False

        assert [name for name, _, _ in contexts] == ["add", "report"]
        (_, add_ctx, add_thread), (_, report_ctx, report_thread) = contexts
        assert (
            add_ctx.job_id,
            add_ctx.queue,
            add_ctx.tenant_id,
            add_ctx.job_type,
            add_ctx.attempt,
            add_ctx.max_attempts,
            add_ctx.scope,
        ) == (add.job_id, "mail", "tenant-b", "tests.add.v1", 1, 4, None)
        assert (
            report_ctx.job_id,
            report_ctx.queue,
            report_ctx.tenant_id,
            report_ctx.job_type,
            report_ctx.attempt,
            report_ctx.max_attempts,
        ) == (report.job_id, "mail", "T-c", "tests.report.v1", 1, 3)
        assert add_thread == threading.main_thread().name
        assert report_thread.startswith("caravel-job")
        assert not add_ctx.is_cancelled
        assert not report_ctx.is_cancelled

        assert (await status_of(queue, add.job_id, "mail", "tenant-b")).state is (
            JobState.COMPLETED
        )
        assert (await status_of(queue, report.job_id, "mail", "T-c")).state is (JobState.COMPLETED)


async def test_context_reports_the_current_attempt(db_url: str) -> None:
    clock = ManualClock()
    attempts: list[int] = []

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        attempts.append(ctx.attempt)
        if ctx.attempt < 3:
            raise RuntimeError("not yet")

    async with open_queue(db_url, registry_for(handle), clock=clock) as queue:
        job = await queue.enqueue(Add(1), dispatch())
        runs = await drain(queue, advance=True)  # through the 5 s and 10 s retry backoffs
        assert [(run.attempt, run.outcome) for run in runs] == [
            (1, "retrying"),
            (2, "retrying"),
            (3, "completed"),
        ]
        assert clock.now_ms() == T0 + 15_000
        assert attempts == [1, 2, 3]
        status = await status_of(queue, job.job_id)
        assert status.state is JobState.COMPLETED
        assert status.attempt == 3


async def test_scope_is_fresh_per_job_and_is_ctx_scope(db_url: str) -> None:
    events: list[tuple[str, object]] = []
    opened = 0

    @dataclasses.dataclass(eq=False)
    class Session:
        number: int

    @asynccontextmanager
    async def scope() -> AsyncIterator[Session]:
        nonlocal opened
        opened += 1
        session = Session(opened)
        events.append(("enter", session))
        try:
            yield session
        except RuntimeError:
            # The handler's failure reaches the scope, so a session can roll back.
            events.append(("failed", session))
            raise
        events.append(("exit", session))

    async def handle_add(job: Add, ctx: JobContext[Any]) -> None:
        events.append(("run", ctx.scope))
        if job.amount < 0:
            raise RuntimeError("failing inside the scope")

    def handle_report(job: Report, ctx: JobContext[Any]) -> None:
        events.append(("run", ctx.scope))

    clock = ManualClock()
    registry = registry_for(handle_add, handle_report)
    async with (
        open_queue(db_url, registry, clock=clock) as queue,
        QueueWorker(queue, scope=scope) as worker,
    ):
        await queue.enqueue(Add(1), dispatch())
        await clock.advance(timedelta(milliseconds=1))
        await queue.enqueue(Report(report_id="r"), dispatch())
        await clock.advance(timedelta(milliseconds=1))
        await queue.enqueue(Add(-1), dispatch())
        for _ in range(3):
            assert await worker.run_once("default") is True
        assert await worker.run_once("default") is False  # no scope without a job

    sessions = [value for kind, value in events if kind == "enter"]
    assert len(sessions) == 3
    assert len({id(s) for s in sessions}) == 3
    ends = ("exit", "exit", "failed")
    assert events == [
        (kind, session)
        for session, end in zip(sessions, ends, strict=True)
        for kind in ("enter", "run", end)
    ]


# ----- failures -----------------------------------------------------------------------------


async def test_handler_exception_is_handler_failed_and_retried(db_url: str) -> None:
    clock = ManualClock()
    calls: list[int] = []

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        calls.append(ctx.attempt)
        raise RuntimeError("boom")

    async with (
        open_queue(db_url, registry_for(handle), clock=clock) as queue,
        QueueWorker(queue) as worker,
    ):
        job = await queue.enqueue(Add(1), dispatch())
        await clock.advance(timedelta(seconds=1))
        assert await worker.run_once("default") is True

        status = await status_of(queue, job.job_id)
        assert status.state is JobState.READY
        assert status.attempt == 1
        assert status.last_failure == "HandlerFailed"
        assert status.due_at == from_ms(T0 + 1_000 + 5_000)
        assert status.lease_expires_at is None

        assert await worker.run_once("default") is False
        await clock.advance(timedelta(seconds=5))
        assert await worker.run_once("default") is True
        assert calls == [1, 2]
        await clock.advance(timedelta(seconds=10))
        assert await worker.run_once("default") is True
        status = await status_of(queue, job.job_id)
        assert status.state is JobState.DEAD_LETTER
        assert status.attempt == 3
        assert status.last_failure == "HandlerFailed"
        assert worker.lost_acknowledgements == 0


@dataclasses.dataclass(frozen=True)
class Mystery:
    text: str


async def test_unknown_wire_name_is_unknown_job_type(db_url: str) -> None:
    clock = ManualClock()
    producer_registry = JobRegistry()
    producer_registry.register("tests.mystery.v1", Mystery, noop)
    async with open_queue(db_url, producer_registry, clock=clock) as producer:
        mystery = await producer.enqueue(Mystery("?"), dispatch())

    ran: list[int] = []

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        ran.append(job.amount)

    async with open_queue(db_url, registry_for(handle), clock=clock) as queue:
        await clock.advance(timedelta(milliseconds=1))
        good = await queue.enqueue(Add(1), dispatch())
        async with QueueWorker(queue) as worker:
            assert await worker.run_once("default") is True
            status = await status_of(queue, mystery.job_id)
            assert status.job_type == "tests.mystery.v1"
            assert status.last_failure == "UnknownJobType"
            assert status.state is JobState.READY
            assert status.attempt == 1
            assert ran == []

            assert await worker.run_once("default") is True  # the worker keeps going
            assert ran == [1]
            assert (await status_of(queue, good.job_id)).state is JobState.COMPLETED


@pytest.mark.parametrize(
    "stored",
    ['{"amount": "not a number"}', "{{{", '{"note": "no amount"}', "[]", ""],
    ids=["wrong-type", "invalid-json", "missing-field", "wrong-shape", "empty"],
)
async def test_undecodable_payload_is_invalid_payload(db_url: str, stored: str) -> None:
    clock = ManualClock()
    ran: list[int] = []

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        ran.append(job.amount)

    async with open_queue(db_url, registry_for(handle), clock=clock, max_attempts=1) as queue:
        bad = await queue.enqueue(Add(1), dispatch())
        await clock.advance(timedelta(milliseconds=1))
        good = await queue.enqueue(Add(2), dispatch())
        async with engine_of(queue).begin() as conn:
            await conn.execute(
                sa.update(jobs).where(jobs.c.id == bad.job_id).values(payload=stored)
            )

        async with QueueWorker(queue) as worker:
            assert await worker.run_once("default") is True
            status = await status_of(queue, bad.job_id)
            assert status.last_failure == "InvalidPayload"
            assert status.state is JobState.DEAD_LETTER
            assert status.attempt == 1
            assert ran == []

            assert await worker.run_once("default") is True
            assert ran == [2]
            assert (await status_of(queue, good.job_id)).state is JobState.COMPLETED


# ----- leases while a handler runs ----------------------------------------------------------


async def test_async_handler_past_its_lease_is_cancelled_and_not_acknowledged(
    db_url: str,
) -> None:
    clock = SteppingClock()
    handle = NeverFinishes()
    started, cancelled = handle.started, handle.cancelled

    async with (
        open_queue(db_url, registry_for(handle), clock=clock) as queue,
        QueueWorker(queue) as worker,
    ):
        job = await queue.enqueue(Add(1), dispatch())
        task = asyncio.ensure_future(worker.run_once("default"))
        await until_watching(clock, task)
        assert started.is_set()

        await clock.advance(LEASE - timedelta(milliseconds=1))
        await until_watching(clock, task)
        assert not cancelled.is_set()

        await clock.advance(timedelta(milliseconds=1))
        assert await within(task) is True
        await within(cancelled.wait())

        status = await status_of(queue, job.job_id)
        assert status.state is JobState.RUNNING
        assert status.attempt == 1
        assert status.lease_expires_at == from_ms(T0 + LEASE_MS)
        assert status.finished_at is None
        assert status.last_failure is None
        assert worker.lost_acknowledgements == 0

        again = await Leases(queue).claim("default")
        assert again is not None
        assert again.job_id == job.job_id
        assert again.attempt == 2


async def test_sync_handler_past_its_lease_sees_cancelled_and_is_not_acknowledged(
    db_url: str,
) -> None:
    clock = SteppingClock()
    started, finished = threading.Event(), threading.Event()
    contexts: list[JobContext[Any]] = []
    saw_cancel: list[bool] = []

    def handle(job: Report, ctx: JobContext[Any]) -> None:
        contexts.append(ctx)
        started.set()
        saw_cancel.append(ctx.cancelled.wait(WAIT))
        finished.set()

    registry = registry_for(report=handle)
    async with open_queue(db_url, registry, clock=clock) as queue, QueueWorker(queue) as worker:
        job = await queue.enqueue(Report(report_id="slow"), dispatch())
        task = asyncio.ensure_future(worker.run_once("default"))
        assert await asyncio.to_thread(started.wait, WAIT)
        await until_watching(clock, task)
        assert not contexts[0].is_cancelled

        await clock.advance(LEASE)
        assert await within(task) is True
        assert contexts[0].is_cancelled
        assert await asyncio.to_thread(finished.wait, WAIT)
        assert saw_cancel == [True]

        status = await status_of(queue, job.job_id)
        assert status.state is JobState.RUNNING
        assert status.attempt == 1
        assert status.last_failure is None
        assert worker.lost_acknowledgements == 0


async def test_renewal_keeps_a_long_handler_leased_until_it_completes(db_url: str) -> None:
    clock = SteppingClock()
    finish = asyncio.Event()

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        await finish.wait()

    renew_every = timedelta(seconds=10)
    async with (
        open_queue(
            db_url, registry_for(handle), clock=clock, lease_renewal_interval=renew_every
        ) as queue,
        QueueWorker(queue) as worker,
    ):
        job = await queue.enqueue(Add(1), dispatch())
        task = asyncio.ensure_future(worker.run_once("default"))
        await until_watching(clock, task)

        for step in range(1, 10):  # three lease durations
            await clock.advance(renew_every)
            await until_watching(clock, task)
            status = await status_of(queue, job.job_id)
            assert status.state is JobState.RUNNING
            assert status.attempt == 1
            assert status.lease_expires_at == from_ms(T0 + step * 10_000 + LEASE_MS)
            assert await Leases(queue).claim("default") is None  # nobody else can take it

        finish.set()
        assert await within(task) is True
        status = await status_of(queue, job.job_id)
        assert status.state is JobState.COMPLETED
        assert status.attempt == 1
        assert status.finished_at == from_ms(T0 + 90_000)
        assert worker.lost_acknowledgements == 0


class HeldRenewals:
    """The queue's real store, except that each renewal, once written, waits for the test to
    release it before it returns to the worker (a renewal slow to come back)."""

    def __init__(self, url: str) -> None:
        from caravel.store import open_store

        self.inner = open_store(url)
        self.written: asyncio.Queue[int] = asyncio.Queue()
        self.release = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def job_renew_lease(self, lease: Any, now: int, expires_at: int) -> Any:
        renewed = await self.inner.job_renew_lease(lease, now, expires_at)
        self.written.put_nowait(expires_at)
        await self.release.wait()
        return renewed


async def test_a_renewal_slow_to_return_does_not_delay_the_next(db_url: str) -> None:
    """The next renewal is due one interval after the previous one computed its lease, even when
    the clock moved on while that renewal was on its way back."""
    clock = SteppingClock()
    finish = asyncio.Event()

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        await finish.wait()

    store = HeldRenewals(db_url)
    options = QueueOptions(lease_duration=LEASE, lease_renewal_interval=timedelta(seconds=10))
    queue = DatabaseQueue(store, registry_for(handle), options=options, clock=clock)  # type: ignore[arg-type]
    async with queue, QueueWorker(queue) as worker:
        job = await queue.enqueue(Add(1), dispatch())
        task = asyncio.ensure_future(worker.run_once("default"))
        await until_watching(clock, task)

        await clock.advance(timedelta(seconds=10))  # T0 + 10 s: the first renewal is written...
        assert await within(store.written.get()) == T0 + 10_000 + LEASE_MS
        await clock.advance(timedelta(seconds=10))  # ...and T0 + 20 s passes before it returns
        store.release.set()

        # The second renewal was due at T0 + 20 s: it comes now, without moving the clock.
        assert await within(store.written.get()) == T0 + 20_000 + LEASE_MS
        status = await status_of(queue, job.job_id)
        assert status.lease_expires_at == from_ms(T0 + 20_000 + LEASE_MS)
        finish.set()
        assert await within(task) is True
        assert (await status_of(queue, job.job_id)).state is JobState.COMPLETED


class AskedClock(ManualClock):
    """A manual clock that tells the test the moment a wait is asked for: at the call, before
    the task that waits has had a chance to start."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = asyncio.Event()

    def sleep_until(self, deadline_ms: int) -> Coroutine[Any, Any, None]:
        self.asked.set()  # ``sleep`` comes here too
        return super().sleep_until(deadline_ms)


async def test_an_advance_as_the_watchdog_starts_its_wait_still_renews_on_time(
    db_url: str,
) -> None:
    """The clock moves to the first renewal between the watchdog choosing its wait and that
    wait starting: the renewal comes at that moment, not one whole advance later."""
    clock = AskedClock()
    finish = asyncio.Event()

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        await finish.wait()

    store = HeldRenewals(db_url)
    store.release.set()  # renewals return as soon as they are written
    options = QueueOptions(lease_duration=LEASE, lease_renewal_interval=timedelta(seconds=10))
    queue = DatabaseQueue(store, registry_for(handle), options=options, clock=clock)  # type: ignore[arg-type]
    async with queue, QueueWorker(queue) as worker:
        await queue.enqueue(Add(1), dispatch())
        task = asyncio.ensure_future(worker.run_once("default"))
        await within(clock.asked.wait())  # the watchdog asked to wait until T0 + 10 s...
        await clock.advance(timedelta(seconds=10))  # ...and T0 + 10 s comes before it waits
        assert await within(store.written.get()) == T0 + 10_000 + LEASE_MS
        finish.set()
        assert await within(task) is True


async def test_handler_is_cancelled_when_the_lease_lifetime_is_reached(db_url: str) -> None:
    clock = SteppingClock()
    handle = NeverFinishes()
    cancelled = handle.cancelled

    async with (
        open_queue(
            db_url,
            registry_for(handle),
            clock=clock,
            lease_renewal_interval=timedelta(seconds=10),
            max_lease_lifetime=timedelta(seconds=45),
        ) as queue,
        QueueWorker(queue) as worker,
    ):
        job = await queue.enqueue(Add(1), dispatch())
        task = asyncio.ensure_future(worker.run_once("default"))
        await until_watching(clock, task)
        for step, expiry in ((1, 40_000), (2, 45_000), (3, 45_000), (4, 45_000)):
            await clock.advance(timedelta(seconds=10))
            await until_watching(clock, task)
            status = await status_of(queue, job.job_id)
            assert status.lease_expires_at == from_ms(T0 + expiry), f"step {step}"

        await clock.advance(timedelta(seconds=5))  # T0 + 45 s: lifetime used up
        assert await within(task) is True
        await within(cancelled.wait())

        status = await status_of(queue, job.job_id)
        assert status.state is JobState.RUNNING
        assert status.attempt == 1
        assert status.lease_expires_at == from_ms(T0 + 45_000)
        assert status.last_failure is None
        assert worker.lost_acknowledgements == 0
        again = await Leases(queue).claim("default")
        assert again is not None
        assert again.attempt == 2


async def test_renewal_rejected_after_supersession_cancels_without_ack(db_url: str) -> None:
    clock = SteppingClock()
    handle = NeverFinishes()
    cancelled = handle.cancelled

    registry = registry_for(handle)
    rival_clock = ManualClock(start=from_ms(T0 + LEASE_MS + 1_000))  # sees the lease expired
    async with (
        open_queue(
            db_url, registry, clock=clock, lease_renewal_interval=timedelta(seconds=10)
        ) as queue,
        open_queue(db_url, registry, clock=rival_clock) as rival,
        QueueWorker(queue) as worker,
    ):
        job = await queue.enqueue(Add(1), dispatch())
        task = asyncio.ensure_future(worker.run_once("default"))
        await until_watching(clock, task)

        taken = await Leases(rival).claim("default")
        assert taken is not None
        assert taken.job_id == job.job_id
        assert taken.attempt == 2

        await clock.advance(timedelta(seconds=10))  # the worker's renewal is rejected
        assert await within(task) is True
        await within(cancelled.wait())

        status = await status_of(queue, job.job_id)
        assert status.state is JobState.RUNNING
        assert status.attempt == 2
        assert status.lease_expires_at == from_ms(taken.lease.expires_at_ms)
        assert status.last_failure is None
        assert worker.lost_acknowledgements == 0
        await Leases(rival).complete(taken.lease)  # the rival still holds the job
        assert (await status_of(queue, job.job_id)).state is JobState.COMPLETED


# ----- database failures --------------------------------------------------------------------


@pytest.fixture
def own_db_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated database this test alone may break (PostgreSQL: a new database)."""
    if backend == "sqlite":
        template: SqliteTemplate = request.getfixturevalue("sqlite_template")
        yield template.copy_to(tmp_path / "own.db")
        return
    with pg_database(migrated=True) as url:
        yield url


def drop_jobs_table(url: str) -> None:
    """Break the queue from outside, through a separate connection."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        conn = sqlite3.connect(str(parsed.database))
        try:
            conn.execute("DROP TABLE caravel_jobs")
            conn.commit()
        finally:
            conn.close()
        return
    dsn = parsed.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True) as pg:
        pg.execute("DROP TABLE caravel_jobs")


async def test_claim_on_a_broken_database_raises_schema_not_ready(own_db_url: str) -> None:
    async with open_queue(own_db_url) as queue, QueueWorker(queue) as worker:
        await queue.enqueue(Add(1), dispatch())
        drop_jobs_table(own_db_url)
        with pytest.raises(SchemaNotReadyError):
            await worker.run_once("default")
        with pytest.raises(SchemaNotReadyError):
            await Leases(queue).claim("default")


async def test_acknowledge_on_a_broken_database_raises_schema_not_ready(
    own_db_url: str,
) -> None:
    calls: list[int] = []

    def handle(job: Report, ctx: JobContext[Any]) -> None:
        calls.append(ctx.attempt)
        drop_jobs_table(own_db_url)

    registry = registry_for(report=handle)
    async with open_queue(own_db_url, registry) as queue, QueueWorker(queue) as worker:
        await queue.enqueue(Report(report_id="r"), dispatch())
        with pytest.raises(SchemaNotReadyError):
            await worker.run_once("default")
        assert calls == [1]


@pytest.mark.parametrize(
    "url",
    ["sqlite:///{tmp}/missing-directory/queue.db", "postgresql://root@127.0.0.1:1/caravel"],
    ids=["sqlite-unopenable", "postgresql-nothing-listening"],
)
async def test_unreachable_database_raises_store_error(url: str, tmp_path: Path) -> None:
    threads_before = set(threading.enumerate())
    async with open_queue(url.format(tmp=tmp_path)) as queue, QueueWorker(queue) as worker:
        with pytest.raises(StoreError) as caught:
            await queue.enqueue(Add(1), dispatch())
        assert caught.value.operation == "job_insert"
        with pytest.raises(StoreError):
            await Leases(queue).claim("default")
        with pytest.raises(StoreError):
            await worker.run_once("default")
        with pytest.raises(StoreError):
            await queue.get_status(UUID(int=1), "default", "tenant-a")
    # aiosqlite stops the thread of a connection that failed to open without awaiting it; let
    # those threads finish while this test's event loop is still open.
    for thread in set(threading.enumerate()) - threads_before:
        if "_connection_worker_thread" in thread.name:
            await asyncio.to_thread(thread.join, WAIT)


async def test_connection_lost_before_acknowledge_raises_store_error(pg_url: str) -> None:
    """PostgreSQL: the server drops every connection of the queue while the handler runs."""
    name = make_url(pg_url).database
    dsn = make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)
    calls: list[int] = []

    def handle(job: Report, ctx: JobContext[Any]) -> None:
        calls.append(ctx.attempt)
        with psycopg.connect(dsn, autocommit=True) as admin:
            rows = admin.execute(
                "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            ).fetchall()
        assert rows
        assert all(terminated for (terminated,) in rows)

    registry = registry_for(report=handle)
    async with open_queue(pg_url, registry) as queue, QueueWorker(queue) as worker:
        job = await queue.enqueue(Report(report_id="r"), dispatch())
        with pytest.raises(StoreError) as caught:
            await worker.run_once("default")
        assert caught.value.operation == "job_complete"
        assert calls == [1]

        # The queue reconnects; the outcome was never recorded, so the job is still leased.
        status = await status_of(queue, job.job_id)
        assert status.state is JobState.RUNNING
        assert status.attempt == 1
        assert status.last_failure is None


# ----- secrecy ------------------------------------------------------------------------------
# That no exception text reaches rows, files, logs, telemetry or pages, on every store, is
# tests/integration/telemetry/test_secrets.py.

CANARY = "canary-5e1f0c9a"


@pytest.mark.parametrize("tracebacks", [False, True], ids=["default", "log-tracebacks"])
async def test_a_failed_handler_is_logged_at_warning_with_its_traceback_only_on_request(
    db_url: str, tracebacks: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="caravel")

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        raise RuntimeError(f"could not process {job.note}")

    options = WorkerOptions(log_tracebacks=tracebacks)
    async with (
        open_queue(db_url, registry_for(handle)) as queue,
        QueueWorker(queue, options=options) as worker,
    ):
        job = await queue.enqueue(Add(1, note=CANARY), dispatch())
        assert await worker.run_once("default") is True
        async with engine_of(queue).connect() as conn:
            rows = (await conn.execute(sa.select(jobs.c.last_failure))).all()
    (failed,) = [r for r in caplog.records if r.getMessage() == "job handler failed"]
    assert failed.levelno == logging.WARNING
    assert (failed.job_id, failed.job_type, failed.error_type) == (  # type: ignore[attr-defined]
        str(job.job_id),
        "tests.add.v1",
        "RuntimeError",
    )
    assert rows == [("HandlerFailed",)]  # the queue's rows never get it, either way
    if tracebacks:
        assert failed.exc_info is not None
        assert "Traceback" in logging.Formatter().format(failed)
    else:
        assert failed.exc_info is None
        assert CANARY not in caplog.text
