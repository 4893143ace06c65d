"""Polling-only workers: no LISTEN at all, each queue looked at on its own interval (timed on a
manual clock), and jobs from another process found by those looks alone."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from caravel import JobContext, QueueWorker, WorkerOptions
from caravel.store.postgresql.cancels import CANCEL_CHANNEL
from caravel.store.postgresql.notifications import CHANNEL, QUEUES_CHANNEL
from caravel.testing import ManualClock
from tests.support import Add, dispatch, open_queue, registry_for, until, within
from tests.support.databases import pg_listeners


class _Recording(ManualClock):
    """A manual clock that remembers how long each caller asked to sleep."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[float] = []

    def sleep(self, seconds: float) -> Any:
        self.asked.append(seconds)
        return super().sleep(seconds)


@pytest.mark.postgres
async def test_a_polling_only_worker_never_listens_and_polls_each_queue_at_its_interval(
    pg_url: str,
) -> None:
    clock = _Recording()
    done: list[tuple[str, int]] = []

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        done.append((ctx.queue, job.amount))

    options = WorkerOptions(
        polling_only=True,
        poll_interval=timedelta(seconds=30),
        poll_intervals={"emails": 0.5, "reports": timedelta(seconds=5)},
        summary_interval=None,
    )
    async with (
        open_queue(pg_url, registry_for(handle), clock=clock) as queue,
        # Another process's queue: its enqueues reach the worker only through the database.
        open_queue(pg_url, registry_for(handle), clock=clock) as producer,
        QueueWorker(queue, options=options) as worker,
    ):
        task = asyncio.ensure_future(worker.run(["emails", "reports"]))
        try:
            # Both fetchers looked once and are waiting out their queue's own interval.
            await until(lambda: {0.5, 5.0} <= set(clock.asked), what="both fetchers idle")
            for channel in (CHANNEL, QUEUES_CHANNEL, CANCEL_CHANNEL):
                assert await pg_listeners(pg_url, channel) == 0, channel
            await producer.enqueue(Add(1), dispatch(queue="emails"))
            await producer.enqueue(Add(2), dispatch(queue="reports"))
            await clock.advance(timedelta(milliseconds=500))
            await until(lambda: ("emails", 1) in done, what="the emails job")
            assert ("reports", 2) not in done
            # A fixed interval, also right after finding work: no shorter look follows.
            assert all(s in (0.5, 5.0, 30.0) or s >= 1 for s in clock.asked), clock.asked
            await clock.advance(timedelta(milliseconds=4500))
            await until(lambda: ("reports", 2) in done, what="the reports job")
        finally:
            worker.stop()
            await within(task)


def test_poll_intervals_are_checked_once_and_kept_as_timedeltas() -> None:
    options = WorkerOptions(poll_intervals={"emails": 0.5, "reports": timedelta(seconds=2)})
    assert dict(options.poll_intervals) == {
        "emails": timedelta(milliseconds=500),
        "reports": timedelta(seconds=2),
    }
    assert options.poll_interval_for("emails") == timedelta(milliseconds=500)
    assert options.poll_interval_for("other") == options.poll_interval
    assert WorkerOptions().polling_only is False
