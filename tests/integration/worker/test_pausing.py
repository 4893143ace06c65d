"""Pausing a queue, end to end through the worker: a paused queue's jobs wait (enqueues still
succeed), ``run_once`` and ``run`` claim none of them, jobs already running finish and are
recorded, and a resume makes them claimable again. Time moves on a manual clock; the one test
on the system clock is PostgreSQL's push, bounded by the guarantee (a second), not timed."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import pytest

from caravel import DatabaseQueue, JobContext, JobState, QueueWorker, SyncQueue, WorkerOptions
from caravel.clock import SystemClock
from caravel.errors import ValidationError
from caravel.testing import ManualClock
from tests.support import Add, dispatch, open_queue, registry_for, status_of, until, within

#: Longer than any test waits on the wall clock: only an advance of the manual clock (or a
#: pushed notification) makes the worker read the paused set again.
MINUTE = timedelta(seconds=60)
QUIET = WorkerOptions(poll_interval=MINUTE, min_poll_interval=MINUTE)
#: Far longer than the minute the clock moves, so a held job's lease never runs out meanwhile.
LONG_LEASE = timedelta(hours=1)


class Gate:
    """A handler that records each job's amount and, for ``held`` amounts, waits for
    :attr:`release`."""

    def __init__(self, *held: int) -> None:
        self.held = set(held)
        self.release = asyncio.Event()
        self.started: dict[int, asyncio.Event] = {}
        self.done: dict[int, asyncio.Event] = {}

    def _event(self, table: dict[int, asyncio.Event], amount: int) -> asyncio.Event:
        return table.setdefault(amount, asyncio.Event())

    async def handle(self, job: Add, ctx: JobContext[Any]) -> None:
        self._event(self.started, job.amount).set()
        if job.amount in self.held:
            await self.release.wait()
        self._event(self.done, job.amount).set()

    async def finished(self, amount: int) -> None:
        await within(self._event(self.done, amount).wait())


@asynccontextmanager
async def running(worker: QueueWorker, queues: list[str]) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.ensure_future(worker.run(queues))
    try:
        yield task
    finally:
        worker.stop()
        await within(task)


async def state(queue: DatabaseQueue, job_id: Any, name: str = "default") -> JobState:
    return (await status_of(queue, job_id, name)).state


async def recorded(queue: DatabaseQueue, job_id: Any) -> None:
    """Return once the job's completion is written (the worker acknowledges in batches)."""

    async def completed() -> bool:
        return await state(queue, job_id) is JobState.COMPLETED

    await until(completed, what="the job's completion to be written")


async def test_run_once_claims_nothing_from_a_paused_queue_until_it_is_resumed(
    db_url: str,
) -> None:
    gate = Gate()
    async with open_queue(db_url, registry_for(gate.handle)) as queue:
        worker = QueueWorker(queue)
        assert await queue.pause_queue("default") is True
        assert await queue.pause_queue("default") is False  # already paused
        waiting = await queue.enqueue(Add(1), dispatch())  # enqueue still accepts work
        assert await worker.run_once("default") is False
        assert await state(queue, waiting.job_id) is JobState.READY
        await queue.enqueue(Add(2), dispatch(queue="other"))
        assert await worker.run_once("other") is True  # other queues carry on

        assert await queue.resume_queue("default") is True
        assert await queue.resume_queue("default") is False
        assert await worker.run_once("default") is True
        assert await state(queue, waiting.job_id) is JobState.COMPLETED
        await worker.close()


async def test_a_job_running_when_its_queue_is_paused_finishes(db_url: str) -> None:
    async def pausing(job: Add, ctx: JobContext[Any]) -> None:
        assert await queue.pause_queue("default")

    async with open_queue(db_url, registry_for(pausing)) as queue:
        worker = QueueWorker(queue)
        first = await queue.enqueue(Add(1), dispatch())
        second = await queue.enqueue(Add(2), dispatch())
        assert await worker.run_once("default") is True
        assert await state(queue, first.job_id) is JobState.COMPLETED
        assert await worker.run_once("default") is False
        assert await state(queue, second.job_id) is JobState.READY
        await worker.close()


async def test_run_skips_a_paused_queue_and_claims_again_after_the_resume(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Paused before the worker starts: it reads the set before its first claim. The resume
    comes from another process's queue; the worker reads it at the latest a poll interval on."""
    caplog.set_level(logging.INFO, logger="caravel")
    clock = ManualClock()
    gate = Gate()
    async with (
        open_queue(db_url, registry_for(gate.handle), clock=clock) as queue,
        open_queue(db_url, registry_for(gate.handle), clock=clock) as operator,
        QueueWorker(queue, options=QUIET) as worker,
    ):
        await operator.pause_queue("a")
        held = await queue.enqueue(Add(1), dispatch(queue="a"))
        async with running(worker, ["a", "b"]):
            await queue.enqueue(Add(2), dispatch(queue="b"))
            await gate.finished(2)
            assert worker.paused == {"a"}
            assert await state(queue, held.job_id, "a") is JobState.READY

            assert await operator.resume_queue("a")
            await clock.advance(MINUTE)  # the worker's poll of the paused set
            await gate.finished(1)
            assert worker.paused == frozenset()
        assert await state(queue, held.job_id, "a") is JobState.COMPLETED
        said = [(r.getMessage(), getattr(r, "queue", None)) for r in caplog.records]
        assert ("queue paused; claiming none of its jobs", "a") in said
        assert ("queue resumed; claiming its jobs again", "a") in said


async def test_a_pause_while_running_stops_claims_and_lets_the_running_job_finish(
    db_url: str,
) -> None:
    clock = ManualClock()
    gate = Gate(1)
    async with (
        open_queue(
            db_url, registry_for(gate.handle), clock=clock, lease_duration=LONG_LEASE
        ) as queue,
        open_queue(db_url, registry_for(gate.handle), clock=clock) as operator,
        QueueWorker(queue, options=QUIET) as worker,
    ):
        async with running(worker, ["a", "b"]):
            first = await queue.enqueue(Add(1), dispatch(queue="a"))
            await within(gate._event(gate.started, 1).wait())
            await operator.pause_queue("a")
            await clock.advance(MINUTE)
            await until(lambda: "a" in worker.paused, what="the worker to read the pause")
            later = await queue.enqueue(Add(2), dispatch(queue="a"))
            gate.release.set()
            await gate.finished(1)
            await queue.enqueue(Add(3), dispatch(queue="b"))
            await gate.finished(3)
            assert await state(queue, later.job_id, "a") is JobState.READY
        assert await state(queue, first.job_id, "a") is JobState.COMPLETED


async def test_a_pause_reaches_a_running_postgresql_worker_within_a_second(pg_url: str) -> None:
    """Polling once a minute: only the notification can tell the worker within the second."""
    gate = Gate(1)
    async with (
        open_queue(pg_url, registry_for(gate.handle), clock=SystemClock()) as queue,  # type: ignore[arg-type]
        open_queue(pg_url, registry_for(gate.handle)) as operator,
        QueueWorker(queue, options=QUIET) as worker,
        running(worker, ["default"]),
    ):
        first = await queue.enqueue(Add(1), dispatch())
        await within(gate._event(gate.started, 1).wait())
        assert await operator.pause_queue("default")
        await until(lambda: "default" in worker.paused, what="the pause", seconds=1.0)
        later = await queue.enqueue(Add(2), dispatch())
        gate.release.set()
        await gate.finished(1)
        await recorded(queue, first.job_id)
        assert await state(queue, later.job_id) is JobState.READY

        assert await operator.resume_queue("default")
        await until(lambda: "default" not in worker.paused, what="the resume", seconds=1.0)
        await gate.finished(2)


def test_the_sync_queue_pauses_and_resumes(db_url: str) -> None:
    with SyncQueue(db_url, registry_for()) as queue:
        assert queue.pause_queue("default") is True
        assert queue.pause_queue("default") is False
        assert queue.resume_queue("default") is True
        assert queue.resume_queue("default") is False


@pytest.mark.parametrize("name", ["", "Upper", "x" * 65, 7])
async def test_a_bad_queue_name_is_refused_and_nothing_is_written(db_url: str, name: Any) -> None:
    async with open_queue(db_url) as queue:
        for action in (queue.pause_queue, queue.resume_queue):
            with pytest.raises(ValidationError) as caught:
                await action(name)
            assert caught.value.field == "queue"
        assert await queue.store.queue_list_paused() == []
