"""The worker's summary: at INFO it says what its handlers finished, one line per queue every
``summary_interval`` (nothing when nothing finished) and a last one when it stops; a completed
job has a line of its own only at DEBUG. The worker runs on a manual clock, so the interval
passes when the test moves it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest

from caravel import DatabaseQueue, JobContext, QueueWorker, WorkerOptions
from caravel.errors import OptionsError
from tests.support import (
    Add,
    SteppingClock,
    dispatch,
    inspector_of,
    open_queue,
    registry_for,
    until,
    within,
)

INTERVAL = timedelta(seconds=10)


def summaries(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage().startswith("jobs finished in the last")]


def written(queue: DatabaseQueue, completed: int, waiting: int) -> Callable[[], Awaitable[bool]]:
    """Whether the outcomes reached the database: ``completed`` jobs done, ``waiting`` failed
    ones back in line for a retry."""

    async def check() -> bool:
        counts = await inspector_of(queue).queue_counts()
        done = sum(c.completed for c in counts)
        again = sum(c.ready + c.delayed for c in counts)
        return (done, again) == (completed, waiting)

    return check


async def test_the_worker_counts_what_finished_per_queue_at_each_interval_and_at_stop(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # DEBUG: each outcome's own line follows its count at once, which tells the test when the
    # worker has counted it (the database has it a moment before).
    caplog.set_level(logging.DEBUG, logger="caravel")
    clock = SteppingClock()
    finished: list[int] = []

    def reported(completed: int, failed: int) -> Callable[[], bool]:
        def check() -> bool:
            said = [r.getMessage() for r in caplog.records]
            return (said.count("job completed"), said.count("job failed")) == (completed, failed)

        return check

    async def handle(job: Add, ctx: JobContext[None]) -> None:
        finished.append(job.amount)
        if job.amount < 0:
            raise RuntimeError("refused")

    options = WorkerOptions(summary_interval=INTERVAL, poll_interval=timedelta(seconds=60))
    hour = timedelta(hours=1)  # the failed job's retry stays out of the test's time
    async with open_queue(
        db_url, registry_for(handle), clock=clock, retry_delay=hour, max_retry_delay=hour
    ) as queue:
        for amount, name in ((1, "alpha"), (2, "alpha"), (-1, "alpha"), (3, "beta")):
            await queue.enqueue(Add(amount), dispatch(queue=name))
        async with QueueWorker(queue, options=options) as worker:
            task = asyncio.ensure_future(worker.run(["alpha", "beta"]))
            try:
                await until(reported(3, 1), what="every outcome to be written")
                assert summaries(caplog) == []  # nothing before the interval has passed
                await clock.advance(INTERVAL)
                await until(lambda: len(summaries(caplog)) == 2, what="the summary")
                alpha, beta = summaries(caplog)
                assert alpha.getMessage() == (
                    "jobs finished in the last 10 s: 2 completed, 1 failed (will retry)"
                )
                assert (alpha.levelno, alpha.queue, alpha.summary) == (  # type: ignore[attr-defined]
                    logging.INFO,
                    "alpha",
                    {"completed": 2, "failed": 1},
                )
                assert beta.getMessage() == "jobs finished in the last 10 s: 1 completed"
                await clock.advance(INTERVAL)  # an idle interval says nothing
                await until(lambda: len(clock.sleeps) > 0, what="the worker to go on")
                await queue.enqueue(Add(4), dispatch(queue="beta"))
                await clock.advance(timedelta(seconds=60))  # the poll that finds it
                await until(reported(4, 1), what="the last outcome to be written")
            finally:
                worker.stop()
                await within(task)
        last = summaries(caplog)[2:]
        assert [(r.queue, r.summary) for r in last] == [("beta", {"completed": 1})]  # type: ignore[attr-defined]
    # One line per completed job only at DEBUG.
    completed = [r for r in caplog.records if r.getMessage() == "job completed"]
    assert {r.levelno for r in completed} == {logging.DEBUG}
    failed = [r for r in caplog.records if r.getMessage() == "job failed"]
    assert [r.levelno for r in failed] == [logging.INFO]


async def test_no_summary_when_it_is_turned_off(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="caravel")
    clock = SteppingClock()
    done = asyncio.Event()

    async def handle(job: Add, ctx: JobContext[None]) -> None:
        done.set()

    options = WorkerOptions(summary_interval=None)
    async with open_queue(db_url, registry_for(handle), clock=clock) as queue:
        await queue.enqueue(Add(1), dispatch())
        async with QueueWorker(queue, options=options) as worker:
            task = asyncio.ensure_future(worker.run("default"))
            try:
                await within(done.wait())
                await until(written(queue, 1, 0), what="the outcome to be written")
                await clock.advance(timedelta(minutes=5))
            finally:
                worker.stop()
                await within(task)
    assert summaries(caplog) == []


@pytest.mark.parametrize("value", [timedelta(milliseconds=999), timedelta(hours=1, seconds=1), 10])
def test_the_interval_is_checked(value: object) -> None:
    with pytest.raises(OptionsError) as raised:
        WorkerOptions(summary_interval=value)  # type: ignore[arg-type]
    assert raised.value.field == "summary_interval"
