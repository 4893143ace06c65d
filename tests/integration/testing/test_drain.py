"""``caravel.testing.drain`` on every database: due jobs and the jobs they enqueue run through
the real worker, each run is reported with its outcome, and with ``advance=True`` a ManualClock
is moved through delays, retry backoffs and expired leases without sleeping."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from caravel import (
    DispatchOptions,
    JobContext,
    JobRegistry,
    JobState,
    LeaseLostError,
    Leases,
    QueueWorker,
)
from caravel.errors import DrainLimitError, ValidationError
from caravel.testing import JobRun, ManualClock, drain
from tests.support import Add, Report, open_queue, status_of


def chain_registry(ran: list[tuple[str, int, int]], *, fail_below: int = 0) -> JobRegistry:
    """``Add(n)`` with n > 0 enqueues ``Add(n - 1)`` in queue "next"; ``Report`` fails on its
    attempts below ``fail_below``."""
    registry = JobRegistry()
    holder: dict[str, Any] = {}

    async def add(job: Add, ctx: JobContext[Any]) -> None:
        ran.append((ctx.queue, job.amount, ctx.attempt))
        if job.amount > 0:
            queue = holder["queue"]
            await queue.enqueue(Add(job.amount - 1), DispatchOptions(queue="next"))

    async def report(job: Report, ctx: JobContext[Any]) -> None:
        ran.append((ctx.queue, len(job.pages), ctx.attempt))
        if ctx.attempt < fail_below:
            raise KeyError("secret detail")

    registry.register("tests.add.v1", Add, add)
    registry.register("tests.report.v1", Report, report)
    registry.holder = holder  # type: ignore[attr-defined]
    return registry


async def test_drain_runs_due_jobs_and_the_jobs_they_enqueue(db_url: str) -> None:
    ran: list[tuple[str, int, int]] = []
    registry = chain_registry(ran)
    async with open_queue(db_url, registry) as queue:
        registry.holder["queue"] = queue  # type: ignore[attr-defined]
        first = await queue.enqueue(Add(2), DispatchOptions(queue="start"))
        runs = await drain(queue)
        assert ran == [("start", 2, 1), ("next", 1, 1), ("next", 0, 1)]
        assert [(r.queue, r.job_type, r.attempt, r.outcome) for r in runs] == [
            ("start", "tests.add.v1", 1, "completed"),
            ("next", "tests.add.v1", 1, "completed"),
            ("next", "tests.add.v1", 1, "completed"),
        ]
        assert runs[0].job_id == first.job_id
        assert runs[0].tenant_id == "default"
        status = await status_of(queue, first.job_id, "start", "default")
        assert status.state is JobState.COMPLETED
        assert await drain(queue) == []  # nothing left


async def test_drain_of_named_queues_leaves_the_others(db_url: str) -> None:
    ran: list[tuple[str, int, int]] = []
    async with open_queue(db_url, chain_registry(ran)) as queue:
        await queue.enqueue(Add(0), DispatchOptions(queue="a"))
        other = await queue.enqueue(Add(0), DispatchOptions(queue="b"))
        runs = await drain(queue, queues=["a"])
        assert [r.queue for r in runs] == ["a"]
        status = await status_of(queue, other.job_id, "b", "default")
        assert status.state is JobState.READY


async def test_a_failure_is_reported_by_category_and_class_never_by_message(db_url: str) -> None:
    ran: list[tuple[str, int, int]] = []
    async with open_queue(db_url, chain_registry(ran, fail_below=5)) as queue:
        await queue.enqueue(Report(report_id="r"), DispatchOptions(queue="r", max_attempts=2))
        (run,) = await drain(queue)
        assert run.outcome == "retrying"
        assert run.failure == "HandlerFailed"
        assert run.error_type == "KeyError"
        assert "secret" not in repr(run)
        assert await drain(queue) == []  # the retry waits for its backoff: time stands still


async def test_advance_moves_through_delays_and_retries_to_a_dead_letter(db_url: str) -> None:
    ran: list[tuple[str, int, int]] = []
    clock = ManualClock()
    start = clock.now_ms()
    async with open_queue(db_url, chain_registry(ran, fail_below=10), clock=clock) as queue:
        await queue.enqueue(Report(report_id="r"), DispatchOptions(queue="r", max_attempts=3))
        runs = await drain(queue, advance=True)
        assert [(r.attempt, r.outcome) for r in runs] == [
            (1, "retrying"),
            (2, "retrying"),
            (3, "dead_letter"),
        ]
        backoffs = queue.options.retry_backoff(1) + queue.options.retry_backoff(2)
        assert clock.now_ms() - start == backoffs // timedelta(milliseconds=1)


async def test_advance_runs_a_delayed_job_at_its_time(db_url: str) -> None:
    ran: list[tuple[str, int, int]] = []
    clock = ManualClock()
    async with open_queue(db_url, chain_registry(ran), clock=clock) as queue:
        due = clock.now() + timedelta(hours=2)
        await queue.enqueue(Add(0), DispatchOptions(queue="later", not_before=due))
        assert await drain(queue) == []
        assert ran == []
        (run,) = await drain(queue, advance=True)
        assert run.outcome == "completed"
        assert clock.now() == due


async def test_a_job_that_keeps_enqueueing_itself_stops_at_max_jobs(db_url: str) -> None:
    registry = JobRegistry()
    holder: dict[str, Any] = {}

    @registry.handles("tests.forever.v1", Add)
    async def forever(job: Add, ctx: JobContext[Any]) -> None:
        await holder["queue"].enqueue(Add(job.amount + 1), DispatchOptions(queue="loop"))

    async with open_queue(db_url, registry) as queue:
        holder["queue"] = queue
        await queue.enqueue(Add(0), DispatchOptions(queue="loop"))
        with pytest.raises(DrainLimitError, match="max_jobs: drain ran 5 jobs") as caught:
            await drain(queue, max_jobs=5)
        assert caught.value.ran == 5


async def test_advance_stops_at_max_jobs_for_a_job_that_keeps_failing(db_url: str) -> None:
    ran: list[tuple[str, int, int]] = []
    async with open_queue(db_url, chain_registry(ran, fail_below=100)) as queue:
        await queue.enqueue(Report(report_id="r"), DispatchOptions(queue="r", max_attempts=100))
        with pytest.raises(DrainLimitError):
            await drain(queue, max_jobs=4, advance=True)
        assert len(ran) == 4


async def test_advance_needs_a_manual_clock(db_url: str) -> None:
    from caravel import DatabaseQueue

    async with DatabaseQueue(db_url, JobRegistry()) as queue:
        with pytest.raises(ValidationError, match="advance: needs a queue whose clock"):
            await drain(queue, advance=True)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"queues": "default"}, "queues"),
        ({"queues": []}, "queues"),
        ({"queues": ["Bad Name"]}, "queues"),
        ({"max_jobs": 0}, "max_jobs"),
        ({"max_jobs": True}, "max_jobs"),
    ],
)
def test_bad_arguments_are_refused_before_anything_runs(kwargs: Any, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        drain(object(), **kwargs)  # type: ignore[call-overload]
    assert caught.value.field == field


def test_drain_refuses_what_is_not_a_queue() -> None:
    with pytest.raises(ValidationError, match="queue: must be a DatabaseQueue or a SyncQueue"):
        drain(object())  # type: ignore[call-overload]


async def test_lease_expiry_recovery_by_time_travel(db_url: str) -> None:
    """A worker claims a job and vanishes; the clock jumps past its lease and another worker
    takes the job over as its second attempt, without any real waiting."""
    ran: list[tuple[str, int, int]] = []
    clock = ManualClock()
    async with open_queue(db_url, chain_registry(ran), clock=clock) as queue:
        accepted = await queue.enqueue(Add(0), DispatchOptions(queue="jobs"))
        crashed = await Leases(queue).claim("jobs")  # the first worker, which never finishes
        assert crashed is not None
        async with QueueWorker(queue) as second:
            assert await second.run_once("jobs") is False  # the lease still holds
            await clock.advance(queue.options.lease_duration + timedelta(milliseconds=1))
            assert await second.run_once("jobs") is True
        assert ran == [("jobs", 0, 2)]
        status = await status_of(queue, accepted.job_id, "jobs", "default")
        assert status.state is JobState.COMPLETED
        # The vanished worker's lease is fenced off: its late completion changes nothing.
        with pytest.raises(LeaseLostError):
            await Leases(queue).complete(crashed.lease)


async def test_drain_with_advance_recovers_an_expired_lease(db_url: str) -> None:
    ran: list[tuple[str, int, int]] = []
    clock = ManualClock()
    async with open_queue(db_url, chain_registry(ran), clock=clock) as queue:
        await queue.enqueue(Add(0), DispatchOptions(queue="jobs"))
        assert await Leases(queue).claim("jobs") is not None
        assert await drain(queue) == []  # held by the vanished worker
        runs = await drain(queue, advance=True)
        assert runs == [
            JobRun(
                job_id=runs[0].job_id,
                queue="jobs",
                tenant_id="default",
                job_type="tests.add.v1",
                attempt=2,
                outcome="completed",
            )
        ]


async def test_exactly_max_jobs_runs_is_not_an_error(db_url: str) -> None:
    ran: list[tuple[str, int, int]] = []
    registry = chain_registry(ran)
    async with open_queue(db_url, registry) as queue:
        registry.holder["queue"] = queue  # type: ignore[attr-defined]
        await queue.enqueue(Add(2), DispatchOptions(queue="start"))  # three runs in all
        runs = await drain(queue, max_jobs=3, advance=True)
        assert [run.outcome for run in runs] == ["completed"] * 3
