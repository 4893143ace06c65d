"""A continuous worker living through its database being unreachable (``outage_window``): claims,
acknowledgements and renewals that fail are tried again after growing pauses, handlers in flight
keep running under their leases, a retried acknowledgement that a takeover fenced off is a lost
lease and nothing worse, and an outage longer than the window stops the worker as any database
failure does.

The store is the real ``memory://`` store over tables that a second, plain store shares (the
producer and the other worker of these tests); while :attr:`Unreachable.down` is set, every
operation of the worker's store fails as it does on a server that cannot be reached (a
:class:`~caravel.StoreError` marked as an outage, as the PostgreSQL and MariaDB stores mark a
lost or refused connection). Time is a :class:`ManualClock`'s.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest

from caravel import (
    DatabaseQueue,
    JobContext,
    JobState,
    Leases,
    QueueOptions,
    QueueWorker,
    StoreError,
    WorkerOptions,
)
from caravel.store.memory.store import MemoryStore
from caravel.store.memory.tables import Tables
from caravel.testing import ManualClock
from tests.support import Add, dispatch, noop, registry_for, until, within

LEASE = timedelta(seconds=30)
POLL = timedelta(seconds=1)
WINDOW = timedelta(seconds=10)
STEP = timedelta(milliseconds=100)


class Unreachable(MemoryStore):
    """The memory store, except that while :attr:`down` every operation fails as an
    unreachable server's does (with :attr:`outage` false: as a database error that is no
    outage). Each failure is kept with the clock's time."""

    def __init__(self, tables: Tables, clock: ManualClock) -> None:
        super().__init__(tables)
        self.clock = clock
        self.down = False
        self.outage = True
        self.claims = 0
        self.failed: list[tuple[str, int]] = []

    @contextmanager
    def _locked(self, operation: str) -> Iterator[Tables]:
        if self.down:
            self.failed.append((operation, self.clock.now_ms()))
            raise StoreError(operation, "connection refused", outage=self.outage)
        if operation == "job_claim":
            self.claims += 1
        with super()._locked(operation) as tables:
            yield tables

    def failures(self, operation: str) -> list[int]:
        return [at for op, at in self.failed if op == operation]


class Setup:
    """A worker over an :class:`Unreachable` store, and a plain queue over the same tables."""

    def __init__(
        self,
        handler: Any,
        *,
        window: timedelta = WINDOW,
        queue_options: QueueOptions | None = None,
    ) -> None:
        self.clock = ManualClock()
        tables = Tables()
        self.store = Unreachable(tables, self.clock)
        options = queue_options or QueueOptions(lease_duration=LEASE)
        registry = registry_for(handler)
        self.queue = DatabaseQueue(self.store, registry, options=options, clock=self.clock)
        self.other = DatabaseQueue(MemoryStore(tables), registry, options=options, clock=self.clock)
        self.worker = QueueWorker(
            self.queue, options=WorkerOptions(poll_interval=POLL, outage_window=window)
        )
        self.running: asyncio.Task[None] | None = None

    async def start(self) -> asyncio.Task[None]:
        self.running = asyncio.create_task(self.worker.run("default"))
        await until(lambda: self.store.claims >= 1, what="the worker's first claim")
        return self.running

    async def advance_until(
        self, condition: Callable[[], bool], *, most: timedelta, what: str
    ) -> None:
        """Move the clock on a step at a time until ``condition()`` holds (at most ``most``)."""
        moved = timedelta(0)
        while not condition():
            assert moved < most, f"{what}: not within {most} of the clock"
            await self.clock.advance(STEP)
            moved += STEP
            await asyncio.sleep(0.001)  # the worker's tasks run (the memory store's too)

    async def state(self, job_id: UUID) -> JobState:
        status = await self.other.get_status(job_id, "default", "tenant-a")
        assert status is not None
        return status.state

    async def close(self) -> None:
        if self.running is not None and not self.running.done():
            self.worker.stop(immediate=True)
            await within(asyncio.gather(self.running, return_exceptions=True))
        await self.worker.close()
        await self.queue.close()
        await self.other.close()


@pytest.fixture
def caplog_worker(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="caravel.worker")
    return caplog


async def test_claims_back_off_through_an_outage_shorter_than_the_window_and_the_worker_goes_on(
    caplog_worker: pytest.LogCaptureFixture,
) -> None:
    handled: list[int] = []

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        handled.append(job.amount)

    s = Setup(handle)
    try:
        running = await s.start()
        s.store.down = True
        await s.advance_until(
            lambda: (
                s.clock.now_ms() - s.store.failures("job_claim")[0] >= 8000
                if s.store.failures("job_claim")
                else False
            ),
            most=timedelta(seconds=12),
            what="eight seconds of failed claims",
        )
        assert not running.done(), "the worker stopped inside its outage window"
        claims = s.store.failures("job_claim")
        gaps = [b - a for a, b in itertools.pairwise(claims)]
        # Pauses of 100 ms doubling to 2 s, each in the upper half of its ceiling (plus up to a
        # step of this test's clock): no busy retrying, no pause beyond the cap.
        assert all(50 <= gap <= 2000 + 100 for gap in gaps), gaps
        assert gaps[:3] == sorted(gaps[:3])
        assert max(gaps) >= 1000
        assert len(claims) <= 15, claims
        job = await s.other.enqueue(Add(7), dispatch())  # enqueued elsewhere meanwhile
        s.store.down = False
        await s.advance_until(lambda: handled == [7], most=timedelta(seconds=5), what="the job")
        await until(lambda: s.worker.outage.since_ms is None, what="the outage to end")
        assert await s.state(job.job_id) is JobState.COMPLETED
        assert not running.done()
        assert s.worker.outage.survived == 1
        s.worker.stop()
        await within(running)  # a normal stop: nothing raised
    finally:
        await s.close()
    messages = caplog_worker.messages
    assert any(m.startswith("database unavailable (StoreError during job_") for m in messages)
    assert any(m.startswith("database reachable again after") for m in messages)
    assert not any(m.startswith("worker stopping") for m in messages)


async def test_an_outage_longer_than_the_window_stops_the_worker_once_it_is_used_up(
    caplog_worker: pytest.LogCaptureFixture,
) -> None:
    s = Setup(noop, window=timedelta(seconds=5))
    try:
        running = await s.start()
        s.store.down = True
        await s.advance_until(running.done, most=timedelta(seconds=10), what="the stop")
        first = min(at for _, at in s.store.failed)
        stopped_after = s.clock.now_ms() - first
        with pytest.raises(StoreError) as raised:
            await running
        assert raised.value.outage
        # Not before the window was used up, and at the try that ends it (one step of the
        # clock, plus the fetcher's loop turn).
        assert 5000 <= stopped_after <= 5000 + 300, stopped_after
    finally:
        await s.close()
    errors = [r.getMessage() for r in caplog_worker.records if r.levelno >= logging.ERROR]
    assert errors[0].startswith("database unavailable for 5s (StoreError during ")
    assert "exit code 1" in errors[0]
    assert errors[1] == "worker stopping: StoreError"


async def test_an_error_that_is_no_outage_stops_the_worker_at_once() -> None:
    s = Setup(noop)
    try:
        running = await s.start()
        s.store.outage = False
        s.store.down = True
        await s.advance_until(running.done, most=timedelta(seconds=2), what="the stop")
        with pytest.raises(StoreError) as raised:
            await running
        assert not raised.value.outage
        assert len(s.store.failed) == 1  # tried once: no retry
    finally:
        await s.close()


async def test_an_acknowledgement_that_failed_in_an_outage_is_written_once_it_ends() -> None:
    go_on = asyncio.Event()
    runs: list[int] = []

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        runs.append(job.amount)
        await go_on.wait()

    s = Setup(handle)
    try:
        running = await s.start()
        job = await s.other.enqueue(Add(1), dispatch())
        await s.advance_until(lambda: runs == [1], most=timedelta(seconds=2), what="the handler")
        s.store.down = True
        go_on.set()  # the handler returns; its acknowledgement fails
        await s.advance_until(
            lambda: len(s.store.failures("job_complete")) >= 3,
            most=timedelta(seconds=5),
            what="the acknowledgement to be tried again",
        )
        assert await s.state(job.job_id) is JobState.RUNNING
        s.store.down = False
        await s.advance_until(
            lambda: s.worker.outage.since_ms is None, most=timedelta(seconds=3), what="the end"
        )
        await until(lambda: s.worker.in_flight == 0, what="the job's task to end")
        assert await s.state(job.job_id) is JobState.COMPLETED
        assert (runs, s.worker.lost_acknowledgements) == ([1], 0)
        assert not running.done()
    finally:
        await s.close()


async def test_a_retried_acknowledgement_fenced_off_by_a_takeover_is_a_lost_lease() -> None:
    go_on = asyncio.Event()
    runs: list[int] = []

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        runs.append(job.amount)
        await go_on.wait()

    # The outage outlasts the lease (30 s): another worker takes the job over meanwhile.
    s = Setup(handle, window=timedelta(seconds=60))
    try:
        running = await s.start()
        job = await s.other.enqueue(Add(1), dispatch())
        await s.advance_until(lambda: runs == [1], most=timedelta(seconds=2), what="the handler")
        s.store.down = True
        go_on.set()
        await s.advance_until(
            lambda: bool(s.store.failures("job_complete")),
            most=timedelta(seconds=2),
            what="the acknowledgement to fail",
        )
        await s.clock.advance(LEASE)
        taken = await Leases(s.other).claim("default")
        assert taken is not None
        assert taken.job_id == job.job_id
        s.store.down = False
        await s.advance_until(
            lambda: s.worker.lost_acknowledgements == 1,
            most=timedelta(seconds=3),
            what="the retried acknowledgement to be refused",
        )
        assert not running.done(), "a fenced-off acknowledgement stopped the worker"
        assert await s.state(job.job_id) is JobState.RUNNING  # the other holder's, untouched
        await Leases(s.other).complete(taken.lease)
        assert await s.state(job.job_id) is JobState.COMPLETED
    finally:
        await s.close()


async def test_a_handler_runs_on_while_its_renewals_fail_in_an_outage() -> None:
    go_on = asyncio.Event()
    ended: list[str] = []

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        try:
            await go_on.wait()
        except asyncio.CancelledError:
            ended.append("cancelled")
            raise
        ended.append("returned")

    options = QueueOptions(lease_duration=LEASE, lease_renewal_interval=timedelta(seconds=5))
    s = Setup(handle, queue_options=options)
    try:
        running = await s.start()
        job = await s.other.enqueue(Add(1), dispatch())
        await s.advance_until(
            lambda: s.worker.in_flight == 1, most=timedelta(seconds=2), what="the handler"
        )
        claimed_at = s.clock.now_ms()
        s.store.down = True
        await s.advance_until(
            lambda: len(s.store.failures("job_renew_lease")) >= 3,
            most=timedelta(seconds=9),
            what="renewals to fail and be tried again",
        )
        assert ended == []  # not cancelled: its lease holds for a while yet
        s.store.down = False
        await s.advance_until(
            lambda: s.worker.outage.since_ms is None, most=timedelta(seconds=3), what="the end"
        )
        status = await s.other.get_status(job.job_id, "default", "tenant-a")
        assert status is not None
        assert status.lease_expires_at is not None
        renewed_to = int(status.lease_expires_at.timestamp() * 1000)
        assert renewed_to > claimed_at + LEASE // timedelta(milliseconds=1)
        go_on.set()
        await until(lambda: s.worker.in_flight == 0, what="the handler to end")
        await s.advance_until(
            lambda: bool(ended), most=timedelta(seconds=1), what="the handler's end"
        )
        assert ended == ["returned"]
        await until(lambda: s.worker.outage.since_ms is None, what="quiet")
        assert await s.state(job.job_id) is JobState.COMPLETED
        assert not running.done()
    finally:
        await s.close()
