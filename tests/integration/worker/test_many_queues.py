"""A worker serving several queues through one set of handler slots.

Each queue has a fetcher of its own and every fetcher takes slots from the same pool, across
awaits: the slots one fetcher asks for must be taken before its claim goes out, or two fetchers
read the same free slots, claim both, and a third reads a negative count. These tests run the
fetchers side by side and the whole worker over four queues, on every database, and check what
the handlers themselves recorded: never more running at once than the worker's concurrency, and
every job done once.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta

import pytest

from caravel import JobContext, Leases, QueueWorker, WorkerOptions
from caravel.clock import SystemClock
from caravel.jobs import ClaimedJob
from caravel.signals import WakeupHub
from caravel.testing import ManualClock
from caravel.worker.fetcher import Fetcher, Slots
from tests.support import Add, dispatch, inspector_of, open_queue, registry_for, within

QUEUES = ("q0", "q1", "q2", "q3")


class Overlap:
    """What handlers record about themselves: how many ran at once, at most, and which jobs
    ran (a lock, since synchronous handlers run in threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.running = 0
        self.highest = 0
        self.done: list[int] = []

    def enter(self) -> None:
        with self._lock:
            self.running += 1
            self.highest = max(self.highest, self.running)

    def leave(self, amount: int) -> None:
        with self._lock:
            self.running -= 1
            self.done.append(amount)


async def test_fetchers_sharing_one_slot_never_claim_more_than_it(db_url: str) -> None:
    clock = ManualClock()
    async with open_queue(db_url, registry_for(), clock=clock) as queue:
        for n, name in enumerate(QUEUES * 2):
            await queue.enqueue(Add(n), dispatch(queue=name))
        release = asyncio.Event()
        started: list[ClaimedJob] = []

        async def hold(claimed: ClaimedJob) -> None:
            started.append(claimed)
            await release.wait()

        slots = Slots(1, hold)
        fetchers = [
            Fetcher(
                name,
                Leases(queue),
                slots,
                wakeups=WakeupHub(),
                options=WorkerOptions(concurrency=1),
                clock=clock,
                push=False,
                stopping=asyncio.Event(),
            )
            for name in QUEUES
        ]
        # Every fetcher sees the free slot before any claim returns.
        counts = await within(asyncio.gather(*(f.run_once() for f in fetchers)))
        assert sum(counts) == 1
        assert len(slots.tasks) == 1
        assert slots.free == 0
        release.set()
        await within(asyncio.gather(*slots.tasks))
        assert slots.free == 1


@pytest.mark.parametrize("concurrency", [1, 2])
@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_worker_over_four_queues_keeps_to_its_concurrency(
    db_url: str, concurrency: int, kind: str
) -> None:
    overlap = Overlap()
    total = 40
    finished = asyncio.Event()
    loop = asyncio.get_running_loop()

    def finish(amount: int) -> None:
        overlap.leave(amount)
        if len(overlap.done) == total:
            loop.call_soon_threadsafe(finished.set)

    async def async_handler(job: Add, ctx: JobContext[None]) -> None:
        overlap.enter()
        await asyncio.sleep(0)  # a real await, so other fetchers run meanwhile
        finish(job.amount)

    def sync_handler(job: Add, ctx: JobContext[None]) -> None:
        overlap.enter()
        finish(job.amount)

    handler = async_handler if kind == "async" else sync_handler
    # The real clock: the worker polls, and nothing here waits for time to pass.
    async with open_queue(db_url, registry_for(handler), clock=SystemClock()) as queue:
        for n in range(total):
            await queue.enqueue(Add(n), dispatch(queue=QUEUES[n % len(QUEUES)]))
        options = WorkerOptions(
            concurrency=concurrency,
            poll_interval=timedelta(milliseconds=200),
            min_poll_interval=timedelta(milliseconds=10),
            shutdown_grace=timedelta(seconds=5),
        )
        async with QueueWorker(queue, options=options) as worker:
            running = asyncio.create_task(worker.run(QUEUES))
            done = asyncio.create_task(finished.wait())
            await asyncio.wait({running, done}, timeout=30, return_when="FIRST_COMPLETED")
            worker.stop()
            await within(running)  # raises what stopped the worker, if anything did
        assert finished.is_set()
        assert sorted(overlap.done) == list(range(total))
        assert 1 <= overlap.highest <= concurrency
        counts = await inspector_of(queue).queue_counts()
        assert sum(c.completed for c in counts) == total
        assert all(c.ready == 0 and c.running == 0 for c in counts)
