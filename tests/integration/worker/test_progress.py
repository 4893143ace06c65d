"""Progress and metadata from running handlers, through a real worker on every database: written
while the job runs, at most once per ``progress_interval`` per job however often a handler
reports, the last report always before the outcome, and fenced by the lease like every other
write of the worker.

The queue's real store is wrapped only to see each progress write as it returns (and count
them); time moves by hand on a :class:`ManualClock`, nothing waits for wall time.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from caravel import (
    DatabaseQueue,
    JobContext,
    JobState,
    Leases,
    QueueOptions,
    QueueWorker,
    StoreError,
    ValidationError,
    WorkerOptions,
)
from caravel.clock import from_ms
from caravel.progress import JobProgress
from caravel.store.protocol import ProgressUpdate
from caravel.testing import ManualClock
from tests.support import LEASE, Add, dispatch, registry_for, status_of, within

INTERVAL = timedelta(seconds=1)
INTERVAL_MS = 1_000


@dataclass(frozen=True)
class Written:
    """One progress write as the store answered it."""

    now: int
    progress: str | None
    meta: str | None
    held: bool


class SeenWrites:
    """The queue's real store; each progress write, once the store answered, is recorded and
    announced to the test."""

    def __init__(self, url: str) -> None:
        from caravel.store import open_store

        self.inner = open_store(url)
        self.writes: list[Written] = []
        self.arrived: asyncio.Queue[Written] = asyncio.Queue()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def job_set_progress(self, update: ProgressUpdate) -> bool:
        held = await self.inner.job_set_progress(update)
        written = Written(update.now, update.progress, update.meta, held)
        self.writes.append(written)
        self.arrived.put_nowait(written)
        return held


def queue_over(store: SeenWrites, handler: Any, clock: ManualClock) -> DatabaseQueue:
    options = QueueOptions(lease_duration=LEASE)
    return DatabaseQueue(store, registry_for(handler), options=options, clock=clock)  # type: ignore[arg-type]


def worker_of(queue: DatabaseQueue) -> QueueWorker:
    return QueueWorker(queue, options=WorkerOptions(progress_interval=INTERVAL))


async def test_a_running_job_shows_its_progress_and_keeps_it_after_completion(
    db_url: str,
) -> None:
    clock = ManualClock()
    store = SeenWrites(db_url)
    step = asyncio.Event()

    async def handle(job: Add, ctx: JobContext[Any]) -> dict[str, int]:
        ctx.progress(1, 3, "fetching")
        ctx.set_meta("source", {"bucket": "reports", "key": "2030/01.csv"})
        await step.wait()
        ctx.progress(3, 3, "done")
        ctx.set_meta("rows", 1200)
        return {"rows": 1200}

    queue = queue_over(store, handle, clock)
    async with queue, worker_of(queue) as worker:
        job = await queue.enqueue(Add(1), dispatch())
        task = asyncio.ensure_future(worker.run_once("default"))

        # The first report is written at once, while the handler waits.
        first = await within(store.arrived.get())
        assert first.held
        running = await status_of(queue, job.job_id)
        assert running.state is JobState.RUNNING
        assert running.progress == JobProgress(1, 3, "fetching", from_ms(clock.now_ms()))
        assert running.meta == {"source": {"bucket": "reports", "key": "2030/01.csv"}}

        # The handler returns at once after its last report, well within the interval: that
        # report is still written, before the outcome.
        step.set()
        assert await within(task) is True
        done = await status_of(queue, job.job_id)
        assert done.state is JobState.COMPLETED
        assert done.progress == JobProgress(3, 3, "done", from_ms(clock.now_ms()))
        assert done.meta == {"source": {"bucket": "reports", "key": "2030/01.csv"}, "rows": 1200}
        assert done.result == {"rows": 1200}
        assert len(store.writes) == 2


async def test_a_tight_loop_of_reports_writes_at_most_once_per_interval(db_url: str) -> None:
    clock = ManualClock()
    store = SeenWrites(db_url)
    calls = 100_000

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        for n in range(1, calls + 1):
            ctx.progress(n, calls)
            if n % 1_000 == 0:  # 100 steps of 100 ms: 10 s of the clock in all
                await clock.advance(timedelta(milliseconds=100))
        ctx.set_meta("calls", calls)

    queue = queue_over(store, handle, clock)
    async with queue, worker_of(queue) as worker:
        start = clock.now_ms()
        job = await queue.enqueue(Add(1), dispatch())
        assert await within(worker.run_once("default")) is True
        status = await status_of(queue, job.job_id)

    writes = store.writes
    # One write per interval of the 10 s at most, and the last report before the outcome.
    assert 2 <= len(writes) <= 10 + 1 + 1, len(writes)
    assert all(w.held for w in writes)
    # Every write but the last (made when the handler returned) is an interval or more after
    # the one before it.
    moments = [w.now for w in writes[:-1]]
    assert all(b - a >= INTERVAL_MS for a, b in itertools.pairwise(moments))
    assert moments[0] >= start
    assert status.state is JobState.COMPLETED
    assert status.progress == JobProgress(calls, calls, None, from_ms(writes[-1].now))
    assert status.meta == {"calls": calls}


async def test_a_frozen_clock_gets_one_write_however_many_reports(db_url: str) -> None:
    clock = ManualClock()
    store = SeenWrites(db_url)

    def handle(job: Add, ctx: JobContext[Any]) -> None:  # a synchronous handler, in a thread
        for n in range(100_000):
            ctx.progress(n)

    queue = queue_over(store, handle, clock)
    async with queue, worker_of(queue) as worker:
        job = await queue.enqueue(Add(1), dispatch())
        assert await within(worker.run_once("default")) is True
        status = await status_of(queue, job.job_id)

    # The first report (written at once, if the loop saw it before the handler returned) and
    # the last one, before the outcome: nothing in between while the clock stands still.
    assert 1 <= len(store.writes) <= 2
    assert status.progress == JobProgress(99_999, None, None, from_ms(clock.now_ms()))


async def test_a_synchronous_handler_reports_from_its_thread(db_url: str) -> None:
    clock = ManualClock()
    store = SeenWrites(db_url)
    release = threading.Event()

    def handle(job: Add, ctx: JobContext[Any]) -> None:
        ctx.progress(5, 10, "half way")
        ctx.set_meta("thread", "handler")
        loop.call_soon_threadsafe(reported.set)
        release.wait(10)
        ctx.progress(10, 10)

    loop = asyncio.get_running_loop()
    reported = asyncio.Event()
    queue = queue_over(store, handle, clock)
    async with queue, worker_of(queue) as worker:
        job = await queue.enqueue(Add(1), dispatch())
        task = asyncio.ensure_future(worker.run_once("default"))
        await within(reported.wait())
        # The first report went at once; the metadata, if it came after that write began,
        # goes an interval later.
        await clock.advance(INTERVAL)
        while not any(w.meta for w in store.writes):
            await within(store.arrived.get())
        running = await status_of(queue, job.job_id)
        assert running.state is JobState.RUNNING
        assert running.progress is not None
        assert (running.progress.done, running.progress.note) == (5, "half way")
        assert running.meta == {"thread": "handler"}
        release.set()
        assert await within(task) is True
        done = await status_of(queue, job.job_id)
        assert done.progress is not None
        assert (done.progress.done, done.progress.total, done.progress.note) == (10, 10, None)


async def test_bad_reports_raise_in_the_handler_and_change_nothing(db_url: str) -> None:
    clock = ManualClock()
    store = SeenWrites(db_url)
    refused: list[str] = []

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        ctx.progress(2, 4, "ok")
        ctx.set_meta("kept", True)
        bad_calls = [
            lambda: ctx.progress(-1),
            lambda: ctx.progress(float("nan"), 4),
            lambda: ctx.progress(1, float("inf")),
            lambda: ctx.progress(5, 4),
            lambda: ctx.progress(1, 0),
            lambda: ctx.progress(1, 4, "x" * 201),
            lambda: ctx.progress(1, 4, "line\nbreak"),
            lambda: ctx.set_meta("", 1),
            lambda: ctx.set_meta("k", object()),
            lambda: ctx.set_meta("k", float("nan")),
            lambda: ctx.set_meta("k", "x" * 9_000),
        ]
        for call in bad_calls:
            with pytest.raises(ValidationError) as caught:
                call()
            refused.append(caught.value.field)

    queue = queue_over(store, handle, clock)
    async with queue, worker_of(queue) as worker:
        job = await queue.enqueue(Add(1), dispatch())
        assert await within(worker.run_once("default")) is True
        status = await status_of(queue, job.job_id)

    assert refused == [
        "done",
        "done",
        "total",
        "done",
        "total",
        "note",
        "note",
        "key",
        "value",
        "value",
        "value",
    ]
    assert status.state is JobState.COMPLETED
    assert status.progress == JobProgress(2, 4, "ok", from_ms(clock.now_ms()))
    assert status.meta == {"kept": True}


async def test_a_stale_worker_is_refused_and_stops_sending(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker whose job was taken over (its clock behind the claimer's: the lease had
    expired for the other worker) reports on: the write is refused, the worker logs it once and
    sends nothing more for that attempt, and its outcome is refused too."""
    clock = ManualClock()
    store = SeenWrites(db_url)
    reported = asyncio.Event()
    go_on = asyncio.Event()

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        ctx.progress(1, 10, "first")
        reported.set()
        await go_on.wait()
        for n in range(2, 11):
            ctx.progress(n, 10, "stale")
            await clock.advance(INTERVAL)
        ctx.set_meta("stale", True)

    queue = queue_over(store, handle, clock)
    async with queue, worker_of(queue) as worker:
        job = await queue.enqueue(Add(1), dispatch())
        task = asyncio.ensure_future(worker.run_once("default"))
        await within(reported.wait())
        assert (await within(store.arrived.get())).held

        # Another worker, whose clock is past the first lease, takes the job over.
        ahead = ManualClock(from_ms(clock.now_ms() + 31_000))
        other = DatabaseQueue(store.inner, registry_for(), clock=ahead)  # the same database
        taken = await Leases(other).claim("default")
        assert taken is not None
        assert taken.job_id == job.job_id

        caplog.set_level(logging.WARNING, logger="caravel.worker")
        go_on.set()
        assert await within(task) is True  # a job was claimed; its outcome was refused
        assert worker.lost_acknowledgements == 1

    refused = [w for w in store.writes if not w.held]
    assert len(refused) == 1  # refused once, then nothing more sent
    assert len(store.writes) == 2
    assert [r.message for r in caplog.records if "progress refused" in r.message] == [
        "job progress refused: the job's lease is no longer this worker's; nothing more is "
        "sent for this attempt"
    ]
    async with DatabaseQueue(db_url, registry_for(), clock=ahead) as reading:
        status = await status_of(reading, job.job_id)
    assert status.state is JobState.RUNNING
    assert status.attempt == 2
    assert status.progress is not None
    assert (status.progress.done, status.progress.note) == (1, "first")
    assert status.meta == {}


class FailingFirst(SeenWrites):
    """The real store, except that the first ``failures`` progress writes fail as a lost
    connection does."""

    def __init__(self, url: str, failures: int) -> None:
        super().__init__(url)
        self.failures = failures

    async def job_set_progress(self, update: ProgressUpdate) -> bool:
        if self.failures > 0:
            self.failures -= 1
            self.arrived.put_nowait(Written(update.now, update.progress, update.meta, False))
            raise StoreError("job_set_progress")
        return await super().job_set_progress(update)


async def test_a_failed_write_is_logged_and_tried_again_an_interval_later(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()
    store = FailingFirst(db_url, failures=1)
    go_on = asyncio.Event()

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        ctx.progress(1, 2, "first")
        await go_on.wait()

    caplog.set_level(logging.WARNING, logger="caravel.worker")
    queue = queue_over(store, handle, clock)
    async with queue, worker_of(queue) as worker:
        job = await queue.enqueue(Add(1), dispatch())
        task = asyncio.ensure_future(worker.run_once("default"))
        failed = await within(store.arrived.get())
        assert failed.held is False
        assert "job progress not written: StoreError" in caplog.messages
        await clock.advance(INTERVAL)  # the same report, again
        again = await within(store.arrived.get())
        assert again.held
        assert (again.now - failed.now, again.progress) == (INTERVAL_MS, failed.progress)
        go_on.set()
        assert await within(task) is True
        status = await status_of(queue, job.job_id)
    assert status.state is JobState.COMPLETED
    assert status.progress == JobProgress(1, 2, "first", from_ms(again.now))


async def test_a_failed_last_write_fails_the_step_as_an_acknowledgement_would(
    db_url: str,
) -> None:
    clock = ManualClock()
    store = FailingFirst(db_url, failures=1)

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        ctx.progress(1, 2)  # written only with the outcome: the handler never yields

    queue = queue_over(store, handle, clock)
    async with queue, worker_of(queue) as worker:
        job = await queue.enqueue(Add(1), dispatch())
        with pytest.raises(StoreError):
            await within(worker.run_once("default"))
        status = await status_of(queue, job.job_id)
    # Nothing was acknowledged: the job runs again once its lease ends.
    assert status.state is JobState.RUNNING
    assert status.progress is None
