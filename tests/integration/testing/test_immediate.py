"""``ImmediateQueue`` on every database: enqueue runs the job through the real worker before it
returns, with the same validation, idempotency and serialization round trip; failures either
raise out of the enqueue or are recorded as a worker records them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from caravel import DispatchOptions, JobContext, JobRegistry, JobState, ValidationError
from caravel.testing import ImmediateQueue, ManualClock, drain
from tests.support import Add, status_of


class Effects:
    """Handlers that record what they saw; ``Add(n)`` with n < 0 fails, n > 0 enqueues n - 1."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int, str]] = []
        self.queue: ImmediateQueue | None = None
        self.registry = JobRegistry()
        self.registry.register("tests.add.v1", Add, self.add)

    async def add(self, job: Add, ctx: JobContext[Any]) -> None:
        self.seen.append((job.amount, ctx.attempt, ctx.queue))
        if job.amount < 0:
            raise LookupError("not shown")
        if job.amount > 0:
            assert self.queue is not None
            await self.queue.enqueue(Add(job.amount - 1), DispatchOptions(queue="inner"))


async def test_enqueue_runs_the_job_and_the_jobs_it_enqueues_before_returning(
    db_url: str,
) -> None:
    effects = Effects()
    async with ImmediateQueue(effects.registry, target=db_url) as queue:
        effects.queue = queue
        accepted = await queue.enqueue(Add(2), DispatchOptions(queue="outer"))
        assert effects.seen == [(2, 1, "outer"), (1, 1, "inner"), (0, 1, "inner")]
        status = await status_of(queue, accepted.job_id, "outer", "default")
        assert status.state is JobState.COMPLETED
        assert [run.outcome for run in queue.runs] == ["completed"] * 3


async def test_an_idempotent_repeat_does_not_run_the_job_again(db_url: str) -> None:
    effects = Effects()
    async with ImmediateQueue(effects.registry, target=db_url) as queue:
        where = DispatchOptions(queue="q", idempotency_key="k-1")
        first = await queue.enqueue(Add(0), where)
        again = await queue.enqueue(Add(0), where)
        assert again.already_enqueued
        assert again.job_id == first.job_id
        assert effects.seen == [(0, 1, "q")]


async def test_a_replace_that_makes_a_delayed_pending_job_due_runs_it(db_url: str) -> None:
    effects = Effects()
    clock = ManualClock()
    async with ImmediateQueue(effects.registry, target=db_url, clock=clock) as queue:
        later = DispatchOptions(
            queue="q",
            pending_key="p-1",
            on_pending="replace",
            not_before=clock.now() + timedelta(minutes=5),
        )
        delayed = await queue.enqueue(Add(0), later)
        assert effects.seen == []  # not due yet
        now = DispatchOptions(queue="q", pending_key="p-1", on_pending="replace")
        replaced = await queue.enqueue(Add(0), now)
        assert (replaced.job_id, replaced.replaced) == (delayed.job_id, True)
        assert effects.seen == [(0, 1, "q")]


async def test_an_invalid_job_is_refused_as_enqueue_refuses_it(db_url: str) -> None:
    async with ImmediateQueue(Effects().registry, target=db_url) as queue:
        with pytest.raises(ValidationError):
            await queue.enqueue(Add(1), "not options")  # type: ignore[arg-type]


async def test_failures_raise_after_the_failed_attempt_is_recorded(db_url: str) -> None:
    effects = Effects()
    async with ImmediateQueue(effects.registry, target=db_url, clock=ManualClock()) as queue:
        with pytest.raises(LookupError, match="not shown"):
            await queue.enqueue(Add(-1), DispatchOptions(queue="q", max_attempts=2))
        (run,) = queue.runs
        assert (run.outcome, run.error_type) == ("retrying", "LookupError")
        status = await status_of(queue, run.job_id, "q", "default")
        assert (status.state, status.attempt, status.last_failure) == (
            JobState.READY,
            1,
            "HandlerFailed",
        )


async def test_recorded_failures_retry_with_backoff_then_dead_letter(db_url: str) -> None:
    effects = Effects()
    clock = ManualClock()
    async with ImmediateQueue(
        effects.registry, target=db_url, failures="record", clock=clock
    ) as queue:
        accepted = await queue.enqueue(Add(-1), DispatchOptions(queue="q", max_attempts=2))
        status = await status_of(queue, accepted.job_id, "q", "default")
        assert status.state is JobState.READY
        assert status.due_at == clock.now() + queue.options.retry_backoff(1)
        runs = await drain(queue, advance=True)
        assert [(r.attempt, r.outcome) for r in runs] == [(2, "dead_letter")]
        assert await queue.replay(accepted.job_id, "q", "default") is True
        assert queue.runs[-1].attempt == 1  # replayed and run again at once


async def test_a_delayed_job_waits_until_the_clock_reaches_it(db_url: str) -> None:
    effects = Effects()
    clock = ManualClock()
    async with ImmediateQueue(effects.registry, target=db_url, clock=clock) as queue:
        due = clock.now() + timedelta(minutes=10)
        await queue.enqueue(Add(0), DispatchOptions(queue="q", not_before=due))
        assert effects.seen == []
        await drain(queue, advance=True)
        assert effects.seen == [(0, 1, "q")]


async def test_enqueue_many_runs_every_new_job(db_url: str) -> None:
    effects = Effects()
    async with ImmediateQueue(effects.registry, target=db_url) as queue:
        effects.queue = queue
        await queue.enqueue_many(
            [(Add(0), DispatchOptions(queue="a")), (Add(0), DispatchOptions(queue="b"))]
        )
        assert sorted(effects.seen) == [(0, 1, "a"), (0, 1, "b")]


def test_failures_must_be_raise_or_record() -> None:
    with pytest.raises(ValidationError, match="failures: must be 'raise' or 'record'"):
        ImmediateQueue(JobRegistry(), target="sqlite:///unused.db", failures="ignore")  # type: ignore[arg-type]
