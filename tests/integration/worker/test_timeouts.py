"""Execution timeouts through the worker, on every database and ``memory://``, stepped on a
manual clock (``QueueWorker.step``).

An attempt that outlives its timeout (the dispatch's, else its job type's) is asked to stop and
fails as ``TimedOut``, retried by the type's policy and dead-lettered after its last attempt; it
is not a lost lease. A handler that finishes first completes. A synchronous handler that ignores
the request is reported stuck after the grace, its lease is renewed no more, and when the lease
ends the attempt is recorded as timed out."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest

from caravel import (
    FailureCategory,
    JobContext,
    JobFailed,
    JobRegistry,
    JobState,
    QueueWorker,
    RetryPolicy,
    WorkerOptions,
)
from caravel.clock import duration_ms
from caravel.worker.service import Step
from tests.conftest import BACKENDS
from tests.support import (
    Add,
    NeverFinishes,
    SteppingClock,
    dispatch,
    open_queue,
    status_of,
    until_watching,
    within,
)
from tests.support.databases import SqliteTemplate, truncate_pg

SECOND = timedelta(seconds=1)
TIMEOUT = timedelta(seconds=10)
RETRY = RetryPolicy(max_attempts=2, base_delay=SECOND, max_delay=SECOND)


@pytest.fixture(params=(*BACKENDS, "memory"))
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def db_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated, empty queue of the parametrized kind, ``memory://`` included."""
    if backend == "memory":
        return f"memory://timeouts-{uuid4().hex}"
    if backend == "sqlite":
        template: SqliteTemplate = request.getfixturevalue("sqlite_template")
        return template.copy_to(tmp_path / "queue.db")
    url: str = request.getfixturevalue("pg_session_url")
    from caravel.store.schema import metadata

    truncate_pg(url, tuple(metadata.tables))
    return url


def registry_with(handler: Any, **registration: Any) -> JobRegistry:
    registry = JobRegistry()
    registry.register("tests.add.v1", Add, handler, **registration)
    return registry


async def started_step(
    worker: QueueWorker, clock: SteppingClock, started: Callable[[], Any]
) -> asyncio.Future[Step | None]:
    """One step of the worker, its handler started and its lease watched."""
    task = asyncio.ensure_future(worker.step("default"))
    await within(started())
    await until_watching(clock, task)
    return task


class Cooperative:
    """A synchronous handler that waits for its cancellation and stops as asked."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self._loop = asyncio.get_running_loop()

    def __call__(self, job: Add, ctx: JobContext[Any]) -> None:
        self._loop.call_soon_threadsafe(self.started.set)
        ctx.cancelled.wait(60)  # a safety net: the test never waits that long
        ctx.raise_if_cancelled()


class Ignores:
    """A synchronous handler that ignores its cancellation: it returns when the test says."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = threading.Event()
        self.contexts: list[JobContext[Any]] = []
        self._loop = asyncio.get_running_loop()

    def __call__(self, job: Add, ctx: JobContext[Any]) -> None:
        self.contexts.append(ctx)
        self._loop.call_soon_threadsafe(self.started.set)
        self.release.wait(60)


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_an_attempt_past_its_timeout_fails_as_timed_out_and_retries_by_policy(
    db_url: str, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="caravel.worker")
    clock = SteppingClock()
    handler = NeverFinishes() if kind == "async" else Cooperative()
    registry = registry_with(handler, timeout=TIMEOUT, retry=RETRY)
    async with (
        open_queue(db_url, registry, clock=clock) as queue,
        QueueWorker(queue) as worker,
    ):
        accepted = await queue.enqueue(Add(1), dispatch())
        for attempt in (1, 2):
            handler.started.clear()
            task = await started_step(worker, clock, handler.started.wait)
            await clock.advance(TIMEOUT - timedelta(milliseconds=1))
            await until_watching(clock, task)  # a millisecond early: still running
            await clock.advance(timedelta(milliseconds=1))
            step = await within(task)
            assert step is not None
            assert step.abandoned is None
            assert step.held
            assert step.outcome is not None
            assert step.outcome.failure is FailureCategory.TIMED_OUT
            got = await status_of(queue, accepted.job_id)
            assert got.last_failure == "TimedOut"
            assert got.attempt == attempt
            if attempt == 1:
                # Retried after the type's backoff (1 s), not at once and not as a lost lease.
                assert got.state is JobState.READY
                assert got.due_at == clock.now() + SECOND
                await clock.advance(SECOND)
            else:
                assert got.state is JobState.DEAD_LETTER
        if kind == "async":
            assert handler.cancelled.is_set()
    timed_out = [r for r in caplog.records if r.getMessage() == "job timed out"]
    assert [(r.job_id, r.job_type, r.queue, r.timeout_ms) for r in timed_out] == [  # type: ignore[attr-defined]
        (str(accepted.job_id), "tests.add.v1", "default", duration_ms(TIMEOUT))
    ] * 2
    assert not [r for r in caplog.records if "abandoned" in r.getMessage()]
    assert not [r for r in caplog.records if "stuck" in r.getMessage()]


async def test_the_dispatch_timeout_beats_the_job_types(db_url: str) -> None:
    clock = SteppingClock()
    handler = NeverFinishes()
    registry = registry_with(handler, timeout=timedelta(minutes=1))
    async with (
        open_queue(db_url, registry, clock=clock, max_attempts=1) as queue,
        QueueWorker(queue) as worker,
    ):
        shorter = await queue.enqueue(Add(1), dispatch(timeout=timedelta(seconds=5)))
        task = await started_step(worker, clock, handler.started.wait)
        await clock.advance(timedelta(seconds=5))
        step = await within(task)
        assert step is not None
        assert step.outcome is not None
        assert step.outcome.failure is FailureCategory.TIMED_OUT
        assert (await status_of(queue, shorter.job_id)).state is JobState.DEAD_LETTER


async def test_a_longer_dispatch_timeout_beats_the_job_types_too(db_url: str) -> None:
    clock = SteppingClock()
    started, finish = asyncio.Event(), asyncio.Event()

    async def handle(job: Add, ctx: JobContext[Any]) -> int:
        started.set()
        await finish.wait()
        return job.amount

    registry = registry_with(handle, timeout=timedelta(seconds=5))
    async with (
        open_queue(db_url, registry, clock=clock, max_attempts=1) as queue,
        QueueWorker(queue) as worker,
    ):
        longer = await queue.enqueue(Add(7), dispatch(timeout=timedelta(seconds=20)))
        task = await started_step(worker, clock, started.wait)
        await clock.advance(timedelta(seconds=19))  # far past the type's 5 s
        await until_watching(clock, task)
        finish.set()
        step = await within(task)
        assert step is not None
        assert step.outcome is not None
        assert step.outcome.succeeded
        got = await status_of(queue, longer.job_id)
        assert (got.state, got.result, got.last_failure) == (JobState.COMPLETED, 7, None)


async def test_a_handler_that_finishes_before_its_timeout_completes(db_url: str) -> None:
    clock = SteppingClock()
    started, finish = asyncio.Event(), asyncio.Event()
    seen: list[bool] = []

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        started.set()
        await finish.wait()
        seen.append(ctx.is_cancelled)

    async with (
        open_queue(db_url, registry_with(handle, timeout=TIMEOUT), clock=clock) as queue,
        QueueWorker(queue) as worker,
    ):
        accepted = await queue.enqueue(Add(1), dispatch())
        task = await started_step(worker, clock, started.wait)
        await clock.advance(TIMEOUT - timedelta(milliseconds=1))
        await until_watching(clock, task)
        finish.set()
        step = await within(task)
        assert step is not None
        assert step.outcome is not None
        assert step.outcome.succeeded
        assert seen == [False]
        assert (await status_of(queue, accepted.job_id)).state is JobState.COMPLETED
        # Nothing fires later for a job that finished.
        await clock.advance(timedelta(minutes=5))
        assert (await status_of(queue, accepted.job_id)).state is JobState.COMPLETED


async def test_a_handler_stopped_at_its_timeout_may_leave_a_safe_detail(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """What the handler raises as it stops is not its failure (the timeout is), but the safe
    detail it gives is the timed-out attempt's."""
    caplog.set_level(logging.INFO, logger="caravel.worker")
    clock = SteppingClock()
    started = asyncio.Event()

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise JobFailed(f"stopped at {job.note}", safe_detail="stopped at page 3") from None

    async with (
        open_queue(db_url, registry_with(handle, timeout=TIMEOUT), clock=clock) as queue,
        QueueWorker(queue) as worker,
    ):
        accepted = await queue.enqueue(Add(1, note="secret-page"), dispatch())
        task = await started_step(worker, clock, started.wait)
        await clock.advance(TIMEOUT)
        step = await within(task)
        assert step is not None
        assert step.outcome is not None
        assert (step.outcome.failure, step.outcome.detail) == (
            FailureCategory.TIMED_OUT,
            "stopped at page 3",
        )
        assert step.outcome.error_class is None  # the timeout is the cause, not the handler
        got = await status_of(queue, accepted.job_id)
        assert (got.last_failure, got.error_class) == ("TimedOut", None)
    (line,) = [r for r in caplog.records if r.getMessage() == "job timed out"]
    assert line.detail == "stopped at page 3"  # type: ignore[attr-defined]
    assert "secret-page" not in caplog.text


async def test_a_timeout_longer_than_the_lease_is_not_a_lease_expiry(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """With renewal, the lease (30 s) is renewed while the handler runs, and the attempt ends
    at its 45 s timeout, recorded as TimedOut, never abandoned as an expired lease."""
    caplog.set_level(logging.INFO, logger="caravel.worker")
    clock = SteppingClock()
    handler = NeverFinishes()
    registry = registry_with(handler, timeout=timedelta(seconds=45))
    renewal = {"lease_renewal_interval": timedelta(seconds=10)}
    async with (
        open_queue(db_url, registry, clock=clock, max_attempts=1, **renewal) as queue,
        QueueWorker(queue) as worker,
    ):
        accepted = await queue.enqueue(Add(1), dispatch())
        task = await started_step(worker, clock, handler.started.wait)
        for _ in range(4):  # 40 s: past the first lease's end, renewed four times
            await clock.advance(timedelta(seconds=10))
            await until_watching(clock, task)
        assert not handler.cancelled.is_set()
        await clock.advance(timedelta(seconds=5))
        step = await within(task)
        assert step is not None
        assert step.abandoned is None
        assert step.outcome is not None
        assert step.outcome.failure is FailureCategory.TIMED_OUT
        got = await status_of(queue, accepted.job_id)
        assert (got.state, got.last_failure) == (JobState.DEAD_LETTER, "TimedOut")
    assert not [r for r in caplog.records if "abandoned" in r.getMessage()]


async def test_a_sync_handler_that_ignores_its_timeout_is_stuck_and_its_lease_left_to_end(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="caravel.worker")
    clock = SteppingClock()
    handler = Ignores()
    registry = registry_with(handler, timeout=timedelta(seconds=20))
    renewal = {"lease_renewal_interval": timedelta(seconds=10)}
    options = WorkerOptions(timeout_grace=timedelta(seconds=5))
    async with (
        open_queue(db_url, registry, clock=clock, **renewal) as queue,
        QueueWorker(queue, options=options) as worker,
    ):
        start = clock.now()
        accepted = await queue.enqueue(Add(1), dispatch(tenant="tenant-a"))
        try:
            task = await started_step(worker, clock, handler.started.wait)
            for _ in range(2):  # renewed at 10 s and 20 s (the timeout: it only asks)
                await clock.advance(timedelta(seconds=10))
                await until_watching(clock, task)
            [context] = handler.contexts
            assert context.is_cancelled  # asked at the timeout, and ignored
            renewed_until = start + timedelta(seconds=50)
            assert (await status_of(queue, accepted.job_id)).lease_expires_at == renewed_until
            assert not [r for r in caplog.records if "stuck" in r.getMessage()]

            await clock.advance(timedelta(seconds=5))  # the timeout plus the grace: stuck
            await until_watching(clock, task)
            stuck = [r for r in caplog.records if "stuck" in r.getMessage()]
            assert [(r.levelno, r.job_id, r.job_type, r.queue) for r in stuck] == [  # type: ignore[attr-defined]
                (logging.WARNING, str(accepted.job_id), "tests.add.v1", "default")
            ]
            assert "Add" not in stuck[0].getMessage()
            assert "amount" not in str(stuck[0].__dict__)

            # No renewal after that: at 49 s the lease still ends at 50 s, as renewed at 20 s.
            await clock.advance(timedelta(seconds=24))
            await until_watching(clock, task)
            got = await status_of(queue, accepted.job_id)
            assert (got.state, got.lease_expires_at) == (JobState.RUNNING, renewed_until)

            await clock.advance(SECOND)  # the lease ends: the attempt is recorded as timed out
            step = await within(task)
            assert step is not None
            assert step.abandoned is None
            assert step.held
            assert step.outcome is not None
            assert step.outcome.failure is FailureCategory.TIMED_OUT
            got = await status_of(queue, accepted.job_id)
            assert (got.state, got.last_failure, got.attempt) == (JobState.READY, "TimedOut", 1)
        finally:
            handler.release.set()
