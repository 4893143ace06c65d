"""A worker stopping on a database error ends even when a cancel it sent was swallowed: a driver
can catch the ``CancelledError`` that lands inside its own await and return as if never
cancelled (asyncmy's connect did, on Python 3.11), and the loop that made the call then waits for
more work. The store here is the real ``memory://`` store, whose reads and claims behave like a
driver's that does so; nothing else is stood in for."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

import pytest

from caravel import DatabaseQueue, QueueOptions, QueueWorker, StoreError, WorkerOptions
from caravel.store.memory.store import MemoryStore
from caravel.store.memory.tables import Tables
from caravel.store.protocol import ClaimBatch, ClaimRequest
from caravel.store.values import PausedQueue
from caravel.testing import ManualClock
from caravel.worker.ending import cancel_and_wait
from tests.support import LEASE, Add, dispatch, registry_for, until, within

POLL = timedelta(seconds=1)


class SwallowingStore(MemoryStore):
    """The memory store, except that once :attr:`armed` its next read of the paused queues
    waits until it is cancelled and then returns as if it had not been (the cancel swallowed),
    and that with :attr:`failing` its claims fail as a lost connection's would."""

    armed = False
    failing = False
    reads = 0
    swallowed = 0

    def __init__(self, tables: Tables) -> None:
        super().__init__(tables)
        self.waiting = asyncio.Event()

    async def queue_list_paused(self) -> list[PausedQueue]:
        self.reads += 1
        if self.armed:
            self.armed = False
            self.waiting.set()
            try:
                await asyncio.Event().wait()  # an answer that never comes, until cancelled
            except asyncio.CancelledError:
                self.swallowed += 1  # not raised, nor taken back with uncancel()
        return await super().queue_list_paused()

    async def job_claim_many(self, request: ClaimRequest) -> ClaimBatch:
        if self.failing:
            raise StoreError("job_claim", "Lost connection to server during query")
        return await super().job_claim_many(request)


async def test_a_stop_on_a_store_error_ends_though_a_loop_swallowed_its_cancel() -> None:
    clock = ManualClock()
    store = SwallowingStore(Tables())
    queue = DatabaseQueue(
        store, registry_for(), options=QueueOptions(lease_duration=LEASE), clock=clock
    )
    worker = QueueWorker(queue, options=WorkerOptions(poll_interval=POLL))
    try:
        running = asyncio.create_task(worker.run("default"))
        # The run reads the paused set once before its loops start; the paused set's loop reads
        # it again after each poll interval, and that read hangs.
        await until(lambda: store.reads >= 1, what="the run's first read of the paused set")
        store.armed = True
        while not store.waiting.is_set():
            await clock.advance(POLL)
        # A claim fails: the worker stops, cancelling its loops. The paused set's loop swallows
        # its cancel and goes back to waiting for its next poll, which the clock never brings.
        store.failing = True
        await queue.enqueue(Add(1), dispatch())
        with pytest.raises(StoreError, match="job_claim"):
            await within(running)
        assert store.swallowed == 1
    finally:
        await worker.close()
        await queue.close()


async def test_cancel_and_wait_cancels_again_and_leaves_what_never_ends() -> None:
    swallows = 0

    async def swallowing_twice() -> None:
        nonlocal swallows
        while swallows < 2:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                swallows += 1

    ending = False

    async def never_ending() -> None:  # until the test says so
        while not ending:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.Event().wait()

    ends = asyncio.create_task(swallowing_twice())
    stays = asyncio.create_task(never_ending())
    try:
        await asyncio.sleep(0)  # both started: a task cancelled before it starts never runs
        # Patience for several rounds of cancels, even on a machine too busy to keep time.
        left = await within(cancel_and_wait([ends, stays], again_after=0.01, patience=2.0))
        assert left == {stays}
        assert ends.done()
        assert not ends.cancelled()  # it returned, after its third cancel
        assert swallows == 2
    finally:  # a task left running would hold up the event loop's close for ever
        ending = True
        stays.cancel()
        await within(stays)
