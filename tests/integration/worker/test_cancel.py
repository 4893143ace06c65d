"""A running job cancelled under its worker: the handler is cancelled cooperatively, the attempt is
not acknowledged, the job stays cancelled, and the log says "cancelled", not "lease lost".

PostgreSQL pushes the cancel (the worker hears it with no clock moved at all); on SQLite the
worker finds it at its look every poll interval, on the queue's clock."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

import pytest

from caravel import CancelOutcome, JobState, Leases, QueueWorker, WorkerOptions
from caravel.context import JobContext
from caravel.testing import ManualClock
from caravel.worker.cancels import CancelWatch
from caravel.worker.watchdog import Abandoned, LeaseWatchdog
from tests.support import (
    Add,
    NeverFinishes,
    SteppingClock,
    dispatch,
    open_queue,
    registry_for,
    status_of,
    within,
)


async def test_a_cancelled_running_job_has_its_handler_cancelled_and_is_not_acknowledged(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = SteppingClock()
    handler = NeverFinishes()
    # Longer than the test waits on the wall clock, well inside the 30 s lease.
    poll = timedelta(seconds=10)
    options = WorkerOptions(poll_interval=poll, min_poll_interval=poll)
    caplog.set_level(logging.INFO, logger="caravel.worker")
    async with (
        open_queue(db_url, registry_for(handler), clock=clock) as queue,
        QueueWorker(queue, options=options) as worker,
    ):
        accepted = await queue.enqueue(Add(1), dispatch())
        task = asyncio.ensure_future(worker.run("default"))
        try:
            await within(handler.started.wait())
            assert await queue.cancel(accepted.job_id, "default", "tenant-a") is (
                CancelOutcome.CANCELLED_RUNNING
            )
            if not db_url.startswith("postgresql"):
                # No push of cancels: the worker's next look, one poll interval on its clock.
                await within(clock.until_sleeping(poll.total_seconds()))
                assert not handler.cancelled.is_set()
                await clock.advance(poll)
            # On PostgreSQL the notice alone does it, well within a second of real time.
            limit = 1 if db_url.startswith("postgresql") else 10
            await asyncio.wait_for(handler.cancelled.wait(), limit)
            # The job's task ends on its own (no acknowledgement to wait for).
            await within(asyncio.gather(*worker._slots.tasks))
            assert worker.in_flight == 0
        finally:
            worker.stop()
            await within(task)
        got = await status_of(queue, accepted.job_id)
        assert got.state is JobState.CANCELLED
        assert worker.lost_acknowledgements == 0
    cancelled = [r for r in caplog.records if r.getMessage() == "job cancelled"]
    assert [(r.job_id, r.job_type) for r in cancelled] == [  # type: ignore[attr-defined]
        (str(accepted.job_id), "tests.add.v1")
    ]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_the_cancel_watch_looks_once_and_cancels_only_cancelled_jobs(
    db_url: str,
) -> None:
    clock = ManualClock()
    async with open_queue(db_url, clock=clock) as queue:
        for n in (1, 2):
            await queue.enqueue(Add(n), dispatch())
        leases = Leases(queue)
        watchdog = LeaseWatchdog(leases)
        watch = CancelWatch(queue.store, watchdog, clock, timedelta(seconds=1))
        assert await watch.run_once() == 0  # nothing running: not even a query
        claimed = [await leases.claim("default") for _ in (1, 2)]
        watched: list[Any] = []
        tasks = []
        ready = asyncio.Event()

        async def job(index: int) -> None:
            found = claimed[index]
            assert found is not None
            context: JobContext[object] = JobContext(
                job_id=found.job_id,
                queue="default",
                tenant_id="tenant-a",
                job_type="tests.add.v1",
                attempt=1,
                max_attempts=3,
                scope=None,
            )
            watched.append(watchdog.watch(found.lease, context))
            if len(watched) == 2:
                ready.set()
            await asyncio.Event().wait()

        tasks = [asyncio.ensure_future(job(i)) for i in (0, 1)]
        await within(ready.wait())
        first = claimed[0]
        assert first is not None
        assert await queue.cancel(first.job_id, "default", "tenant-a") is (
            CancelOutcome.CANCELLED_RUNNING
        )

        assert await watch.run_once() == 1

        await asyncio.gather(tasks[0], return_exceptions=True)
        assert tasks[0].cancelled()
        assert not tasks[1].done()
        by_id = {w.lease.job_id: w for w in watched}
        assert by_id[first.job_id].reason is Abandoned.CANCELLED
        assert by_id[first.job_id].context.is_cancelled
        assert await watch.run_once() == 0  # the cancelled one is no longer watched
        tasks[1].cancel()
        await asyncio.gather(tasks[1], return_exceptions=True)
        await watchdog.close()
