"""Rate limits end to end in one process: a continuous worker with more slots than the rate
starts no more jobs within any window of the period than the rate allows, overall and per
partition key, and completes them all as time moves on; a rate cleared while jobs wait frees
them within the worker's poll interval. Time moves on a manual clock, a quarter of a second at
a time; the jobs' rows give the claim times the rate counts."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from collections.abc import Sequence
from datetime import timedelta
from functools import partial
from typing import Any
from uuid import UUID

from caravel import DatabaseQueue, JobContext, QueueWorker, RateLimit, WorkerOptions
from caravel.clock import to_ms_ceil
from caravel.jobs import JobState
from caravel.testing import ManualClock
from tests.support import (
    WAIT,
    Add,
    dispatch,
    open_queue,
    registry_for,
    status_of,
    until,
    within,
)

SECOND = timedelta(seconds=1)
PERIOD_MS = 1000
#: A poll interval of the period: an idle worker looks again once a window has moved on.
RATED = WorkerOptions(poll_interval=SECOND, min_poll_interval=SECOND, concurrency=8)
TICK = timedelta(milliseconds=250)


@dataclasses.dataclass(frozen=True)
class Upload:
    account: str
    n: int


class Starts:
    """A handler recording the clock's time at each job's start, by job id, with its key."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.at: dict[UUID, tuple[int, str]] = {}
        self.release = asyncio.Event()
        self.held: set[int] = set()

    async def add(self, job: Add, ctx: JobContext[Any]) -> None:
        self.at[ctx.job_id] = (self.clock.now_ms(), "")
        if job.amount in self.held:
            await self.release.wait()

    async def upload(self, job: Upload, ctx: JobContext[Any]) -> None:
        self.at[ctx.job_id] = (self.clock.now_ms(), job.account)

    async def until(self, count: int) -> None:
        await until(lambda: len(self.at) >= count, what=f"{count} jobs to start")


async def _drive(clock: ManualClock, starts: Starts, count: int) -> None:
    """Move the clock on a tick at a time until ``count`` jobs started, letting the worker's
    database round trips run between ticks (real time only bounds the test)."""
    async with asyncio.timeout(WAIT * 3):
        while len(starts.at) < count:
            await clock.advance(TICK)
            await asyncio.sleep(0.01)  # real time for the real I/O; the clock stands still


async def _completed(queue: DatabaseQueue, job_id: UUID) -> bool:
    return (await status_of(queue, job_id)).state is JobState.COMPLETED


async def _claimed_at(queue: DatabaseQueue, ids: Sequence[UUID]) -> dict[UUID, int]:
    """Each job's claim time (its row's ``started_at``), once every job is completed."""
    claimed: dict[UUID, int] = {}
    for job_id in ids:
        # The worker acknowledges in batches.
        await until(partial(_completed, queue, job_id), what="the job's completion to be written")
        status = await status_of(queue, job_id)
        assert status.started_at is not None
        claimed[job_id] = to_ms_ceil(status.started_at)
    return claimed


def _most_in_any_window(starts: Sequence[int]) -> int:
    """The most starts within any window (t - period, t] (each start ends one)."""
    return max((sum(end - PERIOD_MS < at <= end for at in starts) for end in starts), default=0)


def _check_handlers_follow_claims(starts: Starts, claimed: dict[UUID, int]) -> None:
    """Every job's handler ran once, on the clock no earlier than its claim."""
    assert starts.at.keys() == claimed.keys()
    for job_id, (at, _) in starts.at.items():
        assert claimed[job_id] <= at


async def test_a_worker_starts_no_more_than_the_rate_within_any_window(db_url: str) -> None:
    clock = ManualClock()
    starts = Starts(clock)
    async with (
        open_queue(db_url, registry_for(starts.add), clock=clock) as queue,
        QueueWorker(queue, options=RATED) as worker,
    ):
        await queue.set_queue_limit(RateLimit(queue="default", rate=3, period=SECOND))
        ids = [(await queue.enqueue(Add(n), dispatch())).job_id for n in range(10)]
        task = asyncio.ensure_future(worker.run(["default"]))
        try:
            await starts.until(3)  # the first window's three at once, at the start
            assert len(starts.at) == 3
            await _drive(clock, starts, 10)
            claimed = await _claimed_at(queue, ids)
        finally:
            worker.stop()
            await within(task)
    _check_handlers_follow_claims(starts, claimed)
    # Eight slots, ten jobs: only the rate held them back, three to a window and no more.
    assert _most_in_any_window(list(claimed.values())) == 3
    by_moment = Counter(claimed.values())
    assert max(by_moment.values()) == 3
    assert sorted(by_moment.values()) == [1, 3, 3, 3]


async def test_a_rate_per_key_holds_each_key_and_not_the_other(db_url: str) -> None:
    clock = ManualClock()
    starts = Starts(clock)
    registry = registry_for()
    registry.register("tests.upload.v1", Upload, starts.upload, partition_by="account")
    async with (
        open_queue(db_url, registry, clock=clock) as queue,
        QueueWorker(queue, options=RATED) as worker,
    ):
        await queue.set_queue_limit(RateLimit(queue="default", per_key=2, period=SECOND))
        ids = [
            (await queue.enqueue(Upload(account, n), dispatch())).job_id
            for n in range(6)
            for account in ("a", "b")
        ]
        task = asyncio.ensure_future(worker.run(["default"]))
        try:
            await _drive(clock, starts, 12)
            claimed = await _claimed_at(queue, ids)
        finally:
            worker.stop()
            await within(task)
    _check_handlers_follow_claims(starts, claimed)
    for account in ("a", "b"):
        of_key = [claimed[job_id] for job_id, (_, key) in starts.at.items() if key == account]
        assert len(of_key) == 6
        assert _most_in_any_window(of_key) == 2
    # Each key's rate is its own: the two keys start side by side, four within a window.
    assert _most_in_any_window(list(claimed.values())) == 4


async def test_a_cleared_rate_frees_the_waiting_jobs_within_a_poll_interval(
    db_url: str,
) -> None:
    clock = ManualClock()
    starts = Starts(clock)
    starts.held.add(0)  # the first job runs on and wakes nothing when the rate goes
    async with (
        open_queue(db_url, registry_for(starts.add), clock=clock) as queue,
        open_queue(db_url, registry_for(), clock=clock) as operator,
        QueueWorker(queue, options=RATED) as worker,
    ):
        await operator.set_queue_limit(
            RateLimit(queue="default", rate=1, period=timedelta(hours=1))
        )
        for n in range(5):
            await queue.enqueue(Add(n), dispatch())
        task = asyncio.ensure_future(worker.run(["default"]))
        try:
            await starts.until(1)
            assert await operator.clear_queue_limit("default", "rate") is True
            await clock.advance(RATED.poll_interval)  # the worker's next look at the queue
            await starts.until(5)  # an hour's rate was one; the other four start now
            assert {at for at, _ in starts.at.values()} <= {
                clock.now_ms() - PERIOD_MS,
                clock.now_ms(),
            }
        finally:
            starts.release.set()
            worker.stop()
            await within(task)
