"""``caravel.testing.perform``: one handler, run as a worker would run it, without a queue.
The job goes through the same preparation as an enqueue and is read back from its JSON."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import pytest

from caravel import (
    DatabaseQueue,
    DispatchOptions,
    JobContext,
    JobRegistry,
    QueueOptions,
    UnknownJobTypeError,
    ValidationError,
)
from caravel.context import CancellationSignal
from caravel.testing import perform, perform_sync
from tests.support import Add, Report


@dataclass(frozen=True)
class Seen:
    job: object
    ctx: JobContext[Any]
    thread: str


def recording_registry(seen: list[Seen]) -> JobRegistry:
    registry = JobRegistry()

    @registry.handles("tests.add.v1", Add)
    async def add(job: Add, ctx: JobContext[Any]) -> Any:
        seen.append(Seen(job, ctx, threading.current_thread().name))
        if job.amount < 0:
            raise ArithmeticError("negative")
        return job.amount * 2

    @registry.handles("tests.report.v1", Report)
    def report(job: Report, ctx: JobContext[Any]) -> Any:
        seen.append(Seen(job, ctx, threading.current_thread().name))
        return ctx.is_cancelled

    return registry


async def test_the_handler_gets_the_job_as_read_back_and_a_realistic_context() -> None:
    seen: list[Seen] = []
    job = Add(3, note="n")
    job_id = UUID("01890000-0000-7000-8000-000000000001")
    result = await perform(
        recording_registry(seen),
        job,
        queue="math",
        tenant_id="tenant-a",
        attempt=2,
        max_attempts=4,
        scope="the scope",
        job_id=job_id,
    )
    assert result == 6
    (one,) = seen
    assert one.job == job
    assert one.job is not job  # decoded from its JSON, not the caller's object
    ctx = one.ctx
    assert (ctx.job_id, ctx.queue, ctx.tenant_id, ctx.job_type) == (
        job_id,
        "math",
        "tenant-a",
        "tests.add.v1",
    )
    assert (ctx.attempt, ctx.max_attempts, ctx.scope) == (2, 4, "the scope")
    assert not ctx.is_cancelled


async def test_defaults_name_the_default_queue_and_tenant_and_the_queue_attempt_budget() -> None:
    seen: list[Seen] = []
    await perform(recording_registry(seen), Add(1))
    ctx = seen[0].ctx
    budget = QueueOptions().max_attempts
    assert (ctx.queue, ctx.tenant_id, ctx.attempt, ctx.max_attempts) == (
        "default",
        "default",
        1,
        budget,
    )
    assert ctx.job_id.version == 7


async def test_a_failing_handler_raises_its_own_exception() -> None:
    with pytest.raises(ArithmeticError, match="negative"):
        await perform(recording_registry([]), Add(-1))


async def test_a_synchronous_handler_runs_in_a_thread_and_sees_the_cancellation_signal() -> None:
    seen: list[Seen] = []
    signal = CancellationSignal()
    signal.set()
    assert await perform(recording_registry(seen), Report(report_id="r"), cancelled=signal) is True
    assert seen[0].thread != threading.current_thread().name
    assert seen[0].job == Report(report_id="r")


async def test_an_invalid_job_raises_the_same_validation_error_as_enqueue() -> None:
    registry = recording_registry([])
    with pytest.raises(ValidationError) as caught:
        await perform(registry, Add(1), queue="Not A Queue")
    assert caught.value.field == "queue"
    with pytest.raises(ValidationError) as caught:
        await perform(registry, Add(1), tenant_id="")
    assert caught.value.field == "tenant_id"
    with pytest.raises(UnknownJobTypeError):
        await perform(registry, object())


async def test_a_payload_over_the_size_limit_is_refused_as_enqueue_refuses_it(
    db_url: str,
) -> None:
    small = QueueOptions(max_payload_bytes=1024)
    registry = recording_registry([])
    job = Add(1, note="x" * 2000)
    with pytest.raises(ValidationError) as performed:
        await perform(registry, job, options=small)
    async with DatabaseQueue(db_url, registry, options=small) as queue:
        with pytest.raises(ValidationError) as enqueued:
            await queue.enqueue(job, DispatchOptions(queue="default"))
    assert performed.value.field == enqueued.value.field == "payload"
    assert str(performed.value) == str(enqueued.value)


@pytest.mark.parametrize(
    ("attempt", "max_attempts"), [(0, None), (True, None), (3, 2)], ids=["zero", "bool", "over"]
)
async def test_an_impossible_attempt_is_refused(attempt: Any, max_attempts: int | None) -> None:
    with pytest.raises(ValidationError) as caught:
        await perform(recording_registry([]), Add(1), attempt=attempt, max_attempts=max_attempts)
    assert caught.value.field == "attempt"


def test_perform_sync_runs_without_an_event_loop() -> None:
    seen: list[Seen] = []
    assert perform_sync(recording_registry(seen), Add(5), queue="sync") == 10
    assert seen[0].ctx.queue == "sync"
