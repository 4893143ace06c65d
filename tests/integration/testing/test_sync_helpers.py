"""The helpers on a ``SyncQueue``, from plain synchronous tests: drain and the assertions are
plain calls run on the sync queue's own loop, and an ``ImmediateQueue`` behind
``SyncQueue.from_queue`` runs jobs inside the synchronous enqueue, synchronous handlers that
enqueue again included."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from caravel import DispatchOptions, JobContext, JobRegistry, JobState, SyncQueue
from caravel.testing import (
    ImmediateQueue,
    ManualClock,
    all_enqueued,
    assert_enqueued,
    drain,
    refute_enqueued,
)
from tests.support import Add


class Effects:
    """A synchronous handler (it runs in a worker thread): ``Add(n)`` with n < 0 fails, n > 0
    enqueues ``Add(n - 1)`` through the sync queue in ``shell``."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int]] = []
        self.shell: SyncQueue | None = None
        self.registry = JobRegistry()
        self.registry.register("tests.add.v1", Add, self.add)

    def add(self, job: Add, ctx: JobContext[Any]) -> None:
        self.seen.append((job.amount, ctx.attempt))
        if job.amount < 0:
            raise LookupError("not shown")
        if job.amount > 0:
            assert self.shell is not None
            self.shell.enqueue(Add(job.amount - 1), DispatchOptions(queue="inner"))


def test_drain_and_the_assertions_are_plain_calls(db_url: str) -> None:
    effects = Effects()
    with SyncQueue(db_url, effects.registry, clock=ManualClock()) as queue:
        effects.shell = queue
        queue.enqueue(Add(1), DispatchOptions(queue="outer"))
        found = assert_enqueued(queue, Add, payload={"amount": 1}, queue_name="outer")
        assert found.state is JobState.READY
        refute_enqueued(queue, Add, queue_name="inner")

        runs = drain(queue)

        assert [(run.queue, run.outcome) for run in runs] == [
            ("outer", "completed"),
            ("inner", "completed"),
        ]
        assert effects.seen == [(1, 1), (0, 1)]
        assert len(all_enqueued(queue, Add, state=JobState.COMPLETED)) == 2
        with pytest.raises(AssertionError, match=r"found none; enqueued were \(2\)"):
            assert_enqueued(queue, Add, payload={"amount": 7})


def test_drain_advances_a_manual_clock_through_the_retries(db_url: str) -> None:
    effects = Effects()
    clock = ManualClock()
    start = clock.now()
    with SyncQueue(db_url, effects.registry, clock=clock) as queue:
        queue.enqueue(Add(-1), DispatchOptions(queue="q", max_attempts=2))
        runs = drain(queue, advance=True)
        assert [run.outcome for run in runs] == ["retrying", "dead_letter"]
        assert clock.now() - start == queue.queue.options.retry_backoff(1)
        queue.call(clock.advance, timedelta(hours=1))  # moving the clock by hand, from sync code
        assert clock.now() - start == queue.queue.options.retry_backoff(1) + timedelta(hours=1)


def test_an_immediate_queue_behind_a_sync_queue_runs_jobs_inside_enqueue(db_url: str) -> None:
    effects = Effects()
    immediate = ImmediateQueue(effects.registry, target=db_url, clock=ManualClock())
    with SyncQueue.from_queue(immediate) as queue:
        effects.shell = queue
        queue.enqueue(Add(2), DispatchOptions(queue="outer"))
        # Each synchronous handler's enqueue ran the next job while the handler was running.
        assert effects.seen == [(2, 1), (1, 1), (0, 1)]
        with pytest.raises(LookupError, match="not shown"):
            queue.enqueue(Add(-1), DispatchOptions(queue="outer", max_attempts=2))
        assert [run.outcome for run in immediate.runs][-1] == "retrying"
        assert_enqueued(queue, Add, payload={"amount": -1}, state=JobState.READY)
