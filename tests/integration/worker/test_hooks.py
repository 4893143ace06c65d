"""The alert hooks through the real worker on PostgreSQL, SQLite and ``memory://``, stepped on a
manual clock: ``on_dead_letter`` after a dead letter this worker committed (failures exhausted,
a discard, timeouts exhausted), never for a write a newer lease refused; ``on_stuck`` when the
watchdog reports a handler stuck. Hooks are sync or async; one that raises or hangs is logged by
class and bounded, and neither holds up acknowledgements. The event never carries the payload
or an exception's message (a secret canary in the message reaches no event and no log line)."""

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
    AttemptOutcome,
    DatabaseQueue,
    DeadLetterEvent,
    Discard,
    JobContext,
    JobFailed,
    JobRegistry,
    JobState,
    Leases,
    OptionsError,
    QueueWorker,
    RetryPolicy,
    StuckEvent,
    WorkerOptions,
)
from caravel.clock import from_ms
from caravel.testing import ManualClock
from tests.conftest import BACKENDS
from tests.support import (
    LEASE,
    Add,
    NeverFinishes,
    SteppingClock,
    dispatch,
    open_queue,
    status_of,
    until,
    until_watching,
    within,
)
from tests.support.databases import SqliteTemplate, truncate_pg

#: Only ever in exceptions' messages: it may reach no event and no log line.
SECRET = "canary-hook-5e1f0c27"
SECOND = timedelta(seconds=1)
HOOK_TIMEOUT = timedelta(seconds=10)


class PaymentDeclined(Exception):
    """The application's error: its class reaches the hook, never its message."""


@pytest.fixture(params=(*BACKENDS, "memory"))
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def db_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated, empty queue of the parametrized kind, ``memory://`` included."""
    if backend == "memory":
        return f"memory://hooks-{uuid4().hex}"
    if backend == "sqlite":
        template: SqliteTemplate = request.getfixturevalue("sqlite_template")
        return template.copy_to(tmp_path / "queue.db")
    url: str = request.getfixturevalue("pg_session_url")
    from caravel.store.schema import metadata

    truncate_pg(url, tuple(metadata.tables))
    return url


class Seen:
    """A hook that keeps what it is given; ``kind`` says whether it is a plain function (run in
    the hook thread) or an async one."""

    def __init__(self, kind: str) -> None:
        self.events: list[object] = []
        self.arrived = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self.hook: Callable[[Any], Any] = self._async if kind == "async" else self._sync

    async def _async(self, event: object) -> None:
        await asyncio.sleep(0)  # a real coroutine: it awaits
        self.events.append(event)
        self.arrived.set()

    def _sync(self, event: object) -> None:
        assert threading.current_thread() is not threading.main_thread()
        self._loop.call_soon_threadsafe(self._seen, event)

    def _seen(self, event: object) -> None:
        self.events.append(event)
        self.arrived.set()

    async def next(self) -> object:
        await within(self.arrived.wait())
        self.arrived.clear()
        return self.events[-1]


def registry_with(handler: Any, **registration: Any) -> JobRegistry:
    registry = JobRegistry()
    registry.register("tests.add.v1", Add, handler, **registration)
    return registry


def hook_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage() == "worker hook failed"]


def assert_secret_nowhere(caplog: pytest.LogCaptureFixture, *values: object) -> None:
    for value in values:
        assert SECRET not in repr(value)
    for record in caplog.records:
        assert SECRET not in str(record.__dict__), record.getMessage()


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_failures_exhausted_call_the_hook_once_with_the_records_fields(
    db_url: str, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    seen = Seen(kind)

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        raise PaymentDeclined(f"card of {SECRET} declined")

    retry = RetryPolicy(max_attempts=2, base_delay=SECOND, max_delay=SECOND)
    options = WorkerOptions(on_dead_letter=seen.hook)
    clock = ManualClock()
    async with (
        open_queue(db_url, registry_with(handle, retry=retry), clock=clock) as queue,
        QueueWorker(queue, options=options) as worker,
    ):
        job = await queue.enqueue(Add(7), dispatch(tenant="tenant-a"))
        assert await worker.run_once("default")  # attempt 1: a retry, no hook
        await worker._hooks.idle()
        assert seen.events == []
        await clock.advance(SECOND)
        assert await worker.run_once("default")  # attempt 2: the dead letter
        event = await seen.next()
        assert (await status_of(queue, job.job_id)).state is JobState.DEAD_LETTER
        records = await queue.get_attempts(job.job_id, "default", "tenant-a")
    assert records is not None
    last = records[-1]
    assert event == DeadLetterEvent(
        job_id=job.job_id,
        queue="default",
        job_type="tests.add.v1",
        tenant_id="tenant-a",
        attempt=2,
        outcome=AttemptOutcome.FAILED,
        category="HandlerFailed",
        error_class=f"{__name__}.PaymentDeclined",
        detail=None,
    )
    assert (last.attempt, last.outcome, last.category, last.error_class, last.detail) == (
        2,
        AttemptOutcome.FAILED,
        "HandlerFailed",
        f"{__name__}.PaymentDeclined",
        None,
    )
    assert len(seen.events) == 1
    assert hook_records(caplog) == []
    assert_secret_nowhere(caplog, event)


async def test_a_discard_calls_the_hook_with_its_safe_detail_only(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    seen = Seen("async")

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        raise Discard(safe_detail="account\nclosed") from PaymentDeclined(SECRET)

    async with (
        open_queue(db_url, registry_with(handle)) as queue,
        QueueWorker(queue, options=WorkerOptions(on_dead_letter=seen.hook)) as worker,
    ):
        job = await queue.enqueue(Add(1), dispatch())
        assert await worker.run_once("default")
        event = await seen.next()
        [record] = await queue.get_attempts(job.job_id, "default", "tenant-a") or []
    assert isinstance(event, DeadLetterEvent)
    assert (event.outcome, event.category, event.error_class, event.detail) == (
        AttemptOutcome.DISCARDED,
        "Discarded",
        "caravel.directives.Discard",
        "account closed",  # cleaned, as the record keeps it
    )
    assert (record.outcome, record.category, record.error_class, record.detail) == (
        event.outcome,
        event.category,
        event.error_class,
        event.detail,
    )
    assert_secret_nowhere(caplog, event)


async def test_timeouts_exhausted_call_the_hook_as_timed_out(db_url: str) -> None:
    clock = SteppingClock()
    seen = Seen("async")
    handler = NeverFinishes()
    timeout = timedelta(seconds=10)
    registry = registry_with(handler, timeout=timeout, retry=RetryPolicy(max_attempts=1))
    async with (
        open_queue(db_url, registry, clock=clock) as queue,
        QueueWorker(queue, options=WorkerOptions(on_dead_letter=seen.hook)) as worker,
    ):
        job = await queue.enqueue(Add(1), dispatch())
        task = asyncio.ensure_future(worker.step("default"))
        await within(handler.started.wait())
        await until_watching(clock, task)
        await clock.advance(timeout)
        step = await within(task)
        assert step is not None
        assert step.held
        event = await seen.next()
    assert event == DeadLetterEvent(
        job_id=job.job_id,
        queue="default",
        job_type="tests.add.v1",
        tenant_id="tenant-a",
        attempt=1,
        outcome=AttemptOutcome.TIMED_OUT,
        category="TimedOut",
    )


class Ignores:
    """A synchronous handler that ignores its cancellation: it returns when the test says."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = threading.Event()
        self._loop = asyncio.get_running_loop()

    def __call__(self, job: Add, ctx: JobContext[Any]) -> None:
        self._loop.call_soon_threadsafe(self.started.set)
        self.release.wait(60)  # a safety net: the test always releases it


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_stuck_handler_calls_the_stuck_hook(db_url: str, kind: str) -> None:
    clock = SteppingClock()
    seen = Seen(kind)
    handler = Ignores()
    timeout, grace = timedelta(seconds=20), timedelta(seconds=5)
    options = WorkerOptions(timeout_grace=grace, on_stuck=seen.hook)
    async with (
        open_queue(db_url, registry_with(handler, timeout=timeout), clock=clock) as queue,
        QueueWorker(queue, options=options) as worker,
    ):
        job = await queue.enqueue(Add(1), dispatch(tenant="tenant-b"))
        task = asyncio.ensure_future(worker.step("default"))
        try:
            await within(handler.started.wait())
            await until_watching(clock, task)
            await clock.advance(timeout)  # asked to stop, and ignores it: not stuck yet
            await until_watching(clock, task)
            await worker._hooks.idle()
            assert seen.events == []
            await clock.advance(grace)  # the timeout plus the grace: stuck
            event = await seen.next()
        finally:
            handler.release.set()
        step = await within(task)
        assert step is not None
    assert event == StuckEvent(
        job_id=job.job_id,
        queue="default",
        job_type="tests.add.v1",
        tenant_id="tenant-b",
        attempt=1,
        timeout=timeout,
        overdue=grace,
    )
    assert len(seen.events) == 1


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_hook_that_raises_is_logged_by_class_and_the_worker_goes_on(
    db_url: str, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    calls: list[DeadLetterEvent] = []

    def failing(event: DeadLetterEvent) -> None:
        calls.append(event)
        raise RuntimeError(f"alerting down, {SECRET}")

    async def failing_async(event: DeadLetterEvent) -> None:
        failing(event)

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        raise PaymentDeclined(SECRET)

    hook = failing_async if kind == "async" else failing
    options = WorkerOptions(on_dead_letter=hook)
    registry = registry_with(handle, retry=RetryPolicy(max_attempts=1))
    async with (
        open_queue(db_url, registry) as queue,
        QueueWorker(queue, options=options) as worker,
    ):
        jobs = [(await queue.enqueue(Add(n), dispatch())).job_id for n in range(2)]
        for _ in jobs:
            assert await worker.run_once("default")
        await within(worker._hooks.idle())
        for job_id in jobs:
            assert (await status_of(queue, job_id)).state is JobState.DEAD_LETTER
    assert sorted(e.job_id for e in calls) == sorted(jobs)  # the second call was still made
    failed = hook_records(caplog)
    assert [(r.levelno, r.hook, r.reason, r.error_type) for r in failed] == [  # type: ignore[attr-defined]
        (logging.WARNING, "on_dead_letter", "raised", "RuntimeError")
    ] * 2
    assert all(r.exc_info is None for r in failed)
    assert_secret_nowhere(caplog, *calls)


async def test_a_hanging_async_hook_is_cancelled_at_its_bound_and_delays_no_acknowledgement(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="caravel.worker")
    clock = SteppingClock()
    calls: list[DeadLetterEvent] = []
    cancelled = asyncio.Event()

    async def hangs(event: DeadLetterEvent) -> None:
        calls.append(event)
        if len(calls) == 1:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        raise Discard()

    options = WorkerOptions(on_dead_letter=hangs, hook_timeout=HOOK_TIMEOUT)
    async with (
        open_queue(db_url, registry_with(handle), clock=clock) as queue,
        QueueWorker(queue, options=options) as worker,
    ):
        first = (await queue.enqueue(Add(1), dispatch())).job_id
        second = (await queue.enqueue(Add(2), dispatch())).job_id
        step = await within(worker.step("default"))
        assert step is not None
        assert step.held
        await within(clock.sleeper())  # the hook's bound is being waited for
        # The hook hangs; the next job still runs and its outcome is written at once.
        step = await within(worker.step("default"))
        assert step is not None
        assert step.held
        assert (await status_of(queue, second)).state is JobState.DEAD_LETTER
        assert [e.job_id for e in calls] == [first]
        await clock.advance(HOOK_TIMEOUT)
        await within(cancelled.wait())
        await within(worker._hooks.idle())
        assert [e.job_id for e in calls] == [first, second]  # the next call went on
    assert [(r.hook, r.reason, r.error_type) for r in hook_records(caplog)] == [  # type: ignore[attr-defined]
        ("on_dead_letter", "timed_out", None)
    ]


async def test_a_hanging_sync_hook_holds_only_the_hook_thread(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="caravel.worker")
    clock = SteppingClock()
    release = threading.Event()
    entered = threading.Event()

    def hangs(event: DeadLetterEvent) -> None:
        entered.set()
        release.wait(60)  # a safety net: the test releases it

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        raise Discard()

    options = WorkerOptions(on_dead_letter=hangs, hook_timeout=HOOK_TIMEOUT)
    try:
        async with (
            open_queue(db_url, registry_with(handle), clock=clock) as queue,
            QueueWorker(queue, options=options) as worker,
        ):
            await queue.enqueue(Add(1), dispatch())
            second = (await queue.enqueue(Add(2), dispatch())).job_id
            assert await within(worker.run_once("default"))
            await within(asyncio.to_thread(entered.wait, 10))
            assert await within(worker.run_once("default"))  # not held up by the hook
            assert (await status_of(queue, second)).state is JobState.DEAD_LETTER
            await within(clock.sleeper())
            await clock.advance(HOOK_TIMEOUT)  # the first call is given up
            await within(clock.sleeper())
            await clock.advance(HOOK_TIMEOUT)  # the second waited for the thread: given up too
            await within(worker._hooks.idle())
            reasons = [(r.hook, r.reason) for r in hook_records(caplog)]  # type: ignore[attr-defined]
            assert reasons == [("on_dead_letter", "timed_out")] * 2
    finally:
        release.set()


async def test_a_stale_worker_whose_dead_letter_is_refused_calls_no_hook(db_url: str) -> None:
    """A worker whose job was taken over (its clock behind the claimer's) discards the job: its
    write is refused, nothing changed, and the hook is not called."""
    clock = ManualClock()
    seen = Seen("async")
    go_on = asyncio.Event()
    started = asyncio.Event()

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        started.set()
        await go_on.wait()
        raise Discard(safe_detail="too late")

    async with (
        open_queue(db_url, registry_with(handle), clock=clock) as queue,
        QueueWorker(queue, options=WorkerOptions(on_dead_letter=seen.hook)) as worker,
    ):
        job = await queue.enqueue(Add(1), dispatch())
        task = asyncio.ensure_future(worker.step("default"))
        await within(started.wait())

        # Another worker, whose clock is past the first lease, takes the job over.
        ahead = ManualClock(from_ms(clock.now_ms() + LEASE // timedelta(milliseconds=1) + 1))
        async with DatabaseQueue(db_url, registry_with(handle), clock=ahead) as other:
            taken = await Leases(other).claim("default")
            assert taken is not None
            assert taken.job_id == job.job_id

            go_on.set()
            step = await within(task)
            assert step is not None
            assert step.held is False
            assert step.outcome is not None
            assert step.outcome.dead_letter  # a dead letter, had the write held
            assert worker.lost_acknowledgements == 1
            await within(worker._hooks.idle())
            got = await status_of(queue, job.job_id)
            assert (got.state, got.attempt) == (JobState.RUNNING, 2)
    assert seen.events == []


async def test_a_running_worker_calls_the_hook_after_its_batched_acknowledgement(
    db_url: str,
) -> None:
    seen = Seen("async")

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        raise JobFailed(f"upstream {SECRET}", safe_detail="upstream 503")

    registry = registry_with(handle, retry=RetryPolicy(max_attempts=1))
    options = WorkerOptions(concurrency=2, on_dead_letter=seen.hook)
    async with (
        open_queue(db_url, registry) as queue,
        QueueWorker(queue, options=options) as worker,
    ):
        job = await queue.enqueue(Add(1), dispatch())
        task = asyncio.ensure_future(worker.run("default"))
        try:
            event = await seen.next()
        finally:
            worker.stop()
            await within(task)
        assert (await status_of(queue, job.job_id)).state is JobState.DEAD_LETTER
    assert isinstance(event, DeadLetterEvent)
    assert (event.job_id, event.outcome, event.detail) == (
        job.job_id,
        AttemptOutcome.FAILED,
        "upstream 503",
    )
    assert SECRET not in repr(event)


@pytest.mark.parametrize("field", ["on_dead_letter", "on_stuck"])
@pytest.mark.parametrize("value", [42, "alert", lambda: None, lambda a, b: None])
def test_a_hook_that_is_no_function_of_one_event_is_refused_by_name(
    field: str, value: object
) -> None:
    with pytest.raises(OptionsError) as raised:
        WorkerOptions(**{field: value})  # type: ignore[arg-type]
    assert raised.value.field == field


@pytest.mark.parametrize("value", [timedelta(milliseconds=99), timedelta(minutes=6), 10])
def test_the_hook_timeout_is_bounded(value: object) -> None:
    with pytest.raises(OptionsError) as raised:
        WorkerOptions(hook_timeout=value)  # type: ignore[arg-type]
    assert raised.value.field == "hook_timeout"


async def test_a_closing_worker_waits_one_hook_timeout_in_all_and_drops_the_rest(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="caravel.worker")
    clock = SteppingClock()
    calls: list[DeadLetterEvent] = []
    running = asyncio.Event()

    async def hangs(event: DeadLetterEvent) -> None:
        calls.append(event)
        running.set()
        await asyncio.Event().wait()

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        raise Discard()

    options = WorkerOptions(on_dead_letter=hangs, hook_timeout=HOOK_TIMEOUT)
    async with open_queue(db_url, registry_with(handle), clock=clock) as queue:
        worker = QueueWorker(queue, options=options)
        for n in range(3):
            await queue.enqueue(Add(n), dispatch())
            assert await within(worker.run_once("default"))
        await within(running.wait())  # the first call hangs; two wait behind it
        closing = asyncio.ensure_future(worker.close())
        # Once the close waits on the clock too (the first call's bound and its own), one
        # hook_timeout ends both: the close returns and nothing is left running.
        await until(
            lambda: sum(w > clock.now_ms() for w in clock._waking) >= 2,
            what="the close to wait for the hooks",
        )
        await clock.advance(HOOK_TIMEOUT)
        await within(closing)
    reasons = [r.reason for r in hook_records(caplog)]  # type: ignore[attr-defined]
    assert len(reasons) == 3  # every call accounted for
    assert reasons[-1] == "dropped"  # the last never started
    assert set(reasons) <= {"timed_out", "dropped"}
    assert len(calls) <= 2
