"""The continuous worker's loops, stepped in process: each has a ``run_once`` on the injected
clock, so these tests move time by hand and wait on events, never on the wall clock.

The fetcher (batches of half the slots, refills, one expired lease at a time), presence (the
heartbeat row), the lease watchdog, and ``QueueWorker.run`` itself polling on a manual clock.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any
from uuid import uuid4

import pytest

from caravel import (
    DatabaseQueue,
    JobContext,
    JobState,
    Leases,
    QueueInspector,
    QueueWorker,
    WorkerOptions,
)
from caravel.clock import from_ms
from caravel.context import JobContext as Context
from caravel.jobs import ClaimedJob
from caravel.signals import WakeupHub
from caravel.testing import ManualClock
from caravel.worker.fetcher import Fetcher, Slots
from caravel.worker.presence import Presence
from caravel.worker.watchdog import Abandoned, LeaseWatchdog
from tests.support import (
    LEASE,
    Add,
    SteppingClock,
    dispatch,
    inspector_of,
    noop,
    open_queue,
    registry_for,
    until,
    within,
)


class HeldSlots:
    """Handler slots whose jobs run until the test releases them."""

    def __init__(self, concurrency: int) -> None:
        self.release = asyncio.Event()
        self.started: list[ClaimedJob] = []
        self.slots = Slots(concurrency, self._run)

    async def _run(self, claimed: ClaimedJob) -> None:
        self.started.append(claimed)
        await self.release.wait()


def fetcher_for(
    queue: Any,
    held: HeldSlots,
    *,
    concurrency: int,
    clock: ManualClock,
    poll_interval: timedelta = timedelta(seconds=1),
    push: bool = False,
    wakeups: WakeupHub | None = None,
) -> Fetcher:
    return Fetcher(
        "default",
        Leases(queue),
        held.slots,
        wakeups=wakeups if wakeups is not None else WakeupHub(),
        options=WorkerOptions(concurrency=concurrency, poll_interval=poll_interval),
        clock=clock,
        push=push,
        stopping=asyncio.Event(),
    )


async def states(queue: Any) -> dict[str, int]:
    counts = await inspector_of(queue).queue_counts("default")
    return {} if not counts else {"ready": counts[0].ready, "running": counts[0].running}


async def test_a_fetch_claims_half_the_slots_and_refills_until_they_are_taken(
    db_url: str,
) -> None:
    clock = ManualClock()
    async with open_queue(db_url, registry_for(noop), clock=clock) as queue:
        await queue.enqueue_many([(Add(n), dispatch()) for n in range(10)])
        held = HeldSlots(8)
        fetcher = fetcher_for(queue, held, concurrency=8, clock=clock)

        assert await fetcher.run_once() == 4  # half of the eight slots per claim
        await asyncio.sleep(0)  # let the started jobs begin
        assert await fetcher.run_once() == 4  # four free slots are at least a quarter
        assert await fetcher.run_once() == 0  # no slot free
        assert await states(queue) == {"ready": 2, "running": 8}
        assert len({job.job_id for job in held.started}) == 8

        held.release.set()
        await within(asyncio.gather(*held.slots.tasks))
        assert held.slots.free == 8
        assert await fetcher.run_once() == 2
        held.release.set()


async def test_expired_leases_are_taken_over_one_at_a_time_per_process(db_url: str) -> None:
    clock = ManualClock()
    async with open_queue(db_url, registry_for(noop), clock=clock) as queue:
        await queue.enqueue_many([(Add(n), dispatch()) for n in range(2)])
        crashed = await Leases(queue).claim_many("default", 2)  # a worker that then vanished
        assert len(crashed) == 2
        await clock.advance(LEASE)
        await queue.enqueue(Add(9), dispatch())
        held = HeldSlots(4)
        fetcher = fetcher_for(queue, held, concurrency=4, clock=clock)

        # One taken-over job beside a batch of waiting ones, never two at once.
        assert await fetcher.run_once() == 2
        assert held.slots.recovering is not None
        await asyncio.sleep(0)  # let the started jobs begin
        assert sorted(job.attempt for job in held.started) == [1, 2]
        assert await fetcher.run_once() == 0
        expired_left = await Leases(queue).claim_many("default", 4, source="expired")
        assert [job.attempt for job in expired_left] == [2]  # the second one was left alone
        held.release.set()


async def test_recovery_looks_again_only_after_the_poll_interval(db_url: str) -> None:
    clock = ManualClock()
    second = timedelta(seconds=1)
    async with open_queue(db_url, registry_for(noop), clock=clock, lease_duration=second) as queue:
        held = HeldSlots(4)
        poll = timedelta(seconds=5)
        fetcher = fetcher_for(queue, held, concurrency=4, clock=clock, poll_interval=poll)
        await queue.enqueue(Add(1), dispatch())
        assert await Leases(queue).claim("default") is not None  # a worker that then vanished
        assert await fetcher.run_once() == 0  # nothing expired yet: the next look is in 5 s

        await clock.advance(second)  # expired now, but the fetcher looked only a second ago
        assert await fetcher.run_once() == 0
        await clock.advance(poll - second)
        assert await fetcher.run_once() == 1
        assert held.slots.recovering is not None

        held.release.set()
        await within(asyncio.gather(*held.slots.tasks))
        assert held.slots.recovering is None  # finished: look for the next one right away
        assert "default" not in held.slots.recovery_due


async def test_after_a_wake_up_the_announced_job_is_claimed_before_recovery_looks(
    db_url: str,
) -> None:
    """A wake-up's job does not wait for the look for expired leases: it is claimed first, and
    the look follows in the next step (here, once the one slot is free again)."""
    clock = ManualClock()
    async with open_queue(db_url, registry_for(noop), clock=clock) as queue:
        await queue.enqueue(Add(1), dispatch())
        assert await Leases(queue).claim("default") is not None  # a worker that then vanished
        held, hub = HeldSlots(1), WakeupHub()
        minute = timedelta(seconds=60)
        fetcher = fetcher_for(
            queue, held, concurrency=1, clock=clock, poll_interval=minute, push=True, wakeups=hub
        )
        running = asyncio.ensure_future(fetcher.run())
        try:
            await until(
                lambda: "default" in held.slots.recovery_due,
                what="the first look to find nothing and schedule the next one",
            )
            await clock.advance(LEASE)  # the lease expired; the fetcher waits out its minute
            held.slots.recovery_due.clear()  # as when a taken-over job has just finished
            fresh = await queue.enqueue(Add(2), dispatch())
            hub.notify(["default"])
            await until(lambda: bool(held.started), what="the announced job to start")
            assert [(j.job_id, j.attempt) for j in held.started] == [(fresh.job_id, 1)]

            held.release.set()  # the slot frees: the next step takes the expired lease over
            await until(lambda: len(held.started) == 2, what="the expired lease's takeover")
            assert [j.attempt for j in held.started] == [1, 2]
        finally:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)


async def test_presence_registers_beats_and_records_the_shutdown(db_url: str) -> None:
    clock = ManualClock()
    async with open_queue(db_url, clock=clock) as queue:
        running = 3
        presence = Presence(
            queue.store,
            clock,
            worker_id=uuid4(),
            concurrency=4,
            heartbeat_interval=timedelta(seconds=10),
            in_flight=lambda: running,
        )
        await presence.register(["default", "other"])
        await clock.advance(timedelta(seconds=10))
        await presence.run_once()
        inspector = QueueInspector(queue.store, clock=clock)
        (seen,) = await inspector.list_workers()
        assert (seen.state, seen.in_flight, seen.queues) == ("running", 3, ("default", "other"))
        assert seen.heartbeat_at == from_ms(clock.now_ms())

        await clock.advance(timedelta(minutes=2))
        (lost,) = await inspector.list_workers()
        assert lost.state == "lost"
        await presence.deregister()
        (stopped,) = await inspector.list_workers()
        assert (stopped.state, stopped.in_flight) == ("stopped", 0)


async def test_the_watchdog_cancels_a_job_whose_lease_ran_out(db_url: str) -> None:
    clock = ManualClock()
    async with open_queue(db_url, clock=clock) as queue:
        await queue.enqueue(Add(1), dispatch())
        leases = Leases(queue)
        claimed = await leases.claim("default")
        assert claimed is not None
        watchdog = LeaseWatchdog(leases)
        watching = asyncio.Event()
        watched: list[Any] = []

        async def job() -> None:
            context: Context[object] = Context(
                job_id=claimed.job_id,
                queue="default",
                tenant_id="tenant-a",
                job_type="tests.add.v1",
                attempt=1,
                max_attempts=3,
                scope=None,
            )
            watched.append(watchdog.watch(claimed.lease, context))
            watching.set()
            await asyncio.Event().wait()  # a handler that never finishes

        task = asyncio.ensure_future(job())
        await within(watching.wait())
        assert await watchdog.run_once() == claimed.lease.expires_at_ms  # nothing due yet
        assert not task.done()

        await clock.advance(LEASE)
        assert await watchdog.run_once() is None  # the only lease was attended to
        await asyncio.gather(task, return_exceptions=True)
        assert task.cancelled()
        assert watched[0].reason is Abandoned.LEASE_EXPIRED
        assert watched[0].context.is_cancelled
        await watchdog.close()


async def test_a_running_worker_polls_on_its_clock_for_a_job_that_comes_due(
    db_url: str,
) -> None:
    """A job due later is found by polling (no wake-up is sent for it): the poll waits on the
    queue's clock, so moving a manual clock past the due time is what lets the worker see it."""
    clock = SteppingClock()
    first, done = asyncio.Event(), asyncio.Event()
    ran: list[int] = []

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        ran.append(job.amount)
        (first if job.amount == 1 else done).set()

    # A minute between looks, longer than the test would ever wait on the wall clock.
    minute = timedelta(seconds=60)
    options = WorkerOptions(poll_interval=minute, min_poll_interval=minute)
    async with (
        open_queue(db_url, registry_for(handle), clock=clock) as queue,
        QueueWorker(queue, options=options) as worker,
    ):
        await queue.enqueue(Add(1), dispatch())
        later = await queue.enqueue(Add(2), dispatch(not_before=from_ms(clock.now_ms() + 60_000)))
        task = asyncio.ensure_future(worker.run("default"))
        try:
            await within(first.wait())  # due now: claimed as the worker starts
            # The queue is drained for now: the fetcher waits for the poll interval, on the clock.
            await within(clock.until_sleeping(minute.total_seconds()))
            await clock.advance(minute)
            await within(done.wait())
        finally:
            worker.stop()
            await within(task)
        assert ran == [1, 2]
        status = await queue.get_status(later.job_id, "default", "tenant-a")
        assert status is not None
        assert status.state is JobState.COMPLETED


async def test_recovery_looks_at_once_when_the_clock_was_set_back(db_url: str) -> None:
    """An empty look schedules the next one a poll interval later on the clock; if the wall
    clock is then stepped back (NTP), the next look must not wait for it to catch up."""
    clock = ManualClock()
    async with open_queue(db_url, registry_for(noop), clock=clock) as queue:
        held = HeldSlots(4)
        fetcher = fetcher_for(queue, held, concurrency=4, clock=clock)
        assert await fetcher.run_once() == 0  # nothing expired: the next look is in a second
        clock._now -= 10 * 60_000  # stepped back ten minutes
        await queue.enqueue(Add(1), dispatch())
        assert await Leases(queue).claim("default") is not None  # a worker that then vanished
        await clock.advance(LEASE)  # its lease expired, long before the look that was due
        assert await fetcher.run_once() == 1
        held.release.set()


class FailingHeartbeats:
    """The queue's real store, except that heartbeats fail with an error nothing expects."""

    def __init__(self, url: str) -> None:
        from caravel.store import open_store

        self.inner = open_store(url)
        self.failed = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def worker_heartbeat(self, beat: Any) -> None:
        if beat.stopped:  # the shutdown's own record goes through
            await self.inner.worker_heartbeat(beat)
            return
        self.failed.set()
        raise RuntimeError("a bug in the heartbeat")


async def test_a_failing_heartbeat_ends_only_the_heartbeat(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = SteppingClock()
    done = asyncio.Event()

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        done.set()

    store = FailingHeartbeats(db_url)
    queue = DatabaseQueue(store, registry_for(handle), clock=clock)  # type: ignore[arg-type]
    async with queue, QueueWorker(queue) as worker:
        task = asyncio.ensure_future(worker.run("default"))
        try:
            await within(clock.until_sleeping(10.0))  # the heartbeat waits for its interval
            await clock.advance(timedelta(seconds=10))
            await within(store.failed.wait())
            await queue.enqueue(Add(1), dispatch())  # the worker still works
            await within(done.wait())
        finally:
            worker.stop()
            await within(task)  # returns: the heartbeat's error did not stop the worker
    assert "worker heartbeat loop stopped: RuntimeError" in caplog.text
