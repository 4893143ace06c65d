"""What a handler's end stores, through the real worker on every database: results (and the
results that cannot be stored), the exception class of a failure, snoozes and discards, and the
per-type retry policy. ``run_once`` writes at once; ``caravel.testing.drain`` goes through the
same worker step."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from caravel import (
    DatabaseQueue,
    Discard,
    FailureCategory,
    JobContext,
    JobRegistry,
    JobState,
    OptionsError,
    QueueWorker,
    RegistrationError,
    RetryPolicy,
    Snooze,
    SyncQueue,
    ValidationError,
    WorkerOptions,
)
from caravel.clock import from_ms
from caravel.limits import MAX_SNOOZES
from caravel.testing import ManualClock, drain
from tests.support import Add, dispatch, open_queue, registry_for, status_of, within


class PaymentDeclined(Exception):
    """An application's own error, whose class name is stored (never its message)."""


@dataclass(frozen=True)
class Other:
    n: int


async def run_one(queue: DatabaseQueue) -> None:
    async with QueueWorker(queue) as worker:
        assert await worker.run_once("default")


async def test_a_returned_value_is_stored_and_read_through_status_and_get_result(
    db_url: str,
) -> None:
    async def handle(job: Add, ctx: JobContext[Any]) -> dict[str, Any]:
        return {"sum": job.amount + 1, "items": [1, "två", None], "ok": True}

    async with open_queue(db_url, registry_for(handle)) as queue:
        job_id = (await queue.enqueue(Add(41), dispatch())).job_id
        await run_one(queue)

        expected = {"sum": 42, "items": [1, "två", None], "ok": True}
        status = await status_of(queue, job_id)
        assert status.state is JobState.COMPLETED
        assert status.result == expected
        assert await queue.get_result(job_id, "default", "tenant-a") == expected
        # Scoped exactly like the status: another tenant or queue reads nothing.
        assert await queue.get_result(job_id, "default", "tenant-b") is None
        assert await queue.get_result(job_id, "other", "tenant-a") is None


async def test_none_stores_nothing(db_url: str) -> None:
    async with open_queue(db_url, registry_for()) as queue:
        job_id = (await queue.enqueue(Add(1), dispatch())).job_id
        await run_one(queue)
        status = await status_of(queue, job_id)
        assert (status.state, status.result) == (JobState.COMPLETED, None)
        assert (
            await queue.store.job_get_result(
                __import__("caravel.lookup").lookup.job_ref(job_id, "default", "tenant-a")
            )
            is None
        )


@pytest.mark.parametrize(
    ("returned", "category"),
    [
        ("x" * 200, FailureCategory.RESULT_TOO_LARGE),
        ("é" * 60, FailureCategory.RESULT_TOO_LARGE),  # 120 bytes in UTF-8, 60 characters
        ({1, 2}, FailureCategory.RESULT_NOT_SERIALIZABLE),
        (float("nan"), FailureCategory.RESULT_NOT_SERIALIZABLE),
    ],
)
async def test_a_result_that_cannot_be_stored_dead_letters_at_once(
    db_url: str, returned: object, category: FailureCategory
) -> None:
    async def handle(job: Add, ctx: JobContext[Any]) -> object:
        return returned

    async with open_queue(db_url, registry_for(handle), max_result_bytes=100) as queue:
        job_id = (await queue.enqueue(Add(1), dispatch(max_attempts=3))).job_id
        await run_one(queue)
        status = await status_of(queue, job_id)
        assert (status.state, status.attempt, status.last_failure) == (
            JobState.DEAD_LETTER,
            1,
            category.value,
        )
        assert status.result is None
        assert status.error_class is None


async def test_a_result_at_the_limit_is_stored(db_url: str) -> None:
    async def handle(job: Add, ctx: JobContext[Any]) -> str:
        return "x" * 98  # with its quotes, exactly 100 bytes

    async with open_queue(db_url, registry_for(handle), max_result_bytes=100) as queue:
        job_id = (await queue.enqueue(Add(1), dispatch())).job_id
        await run_one(queue)
        assert await queue.get_result(job_id, "default", "tenant-a") == "x" * 98


def test_max_result_bytes_is_validated() -> None:
    from caravel import QueueOptions

    for bad in (0, 1024 * 1024 + 1, True, 1.5):
        with pytest.raises(OptionsError) as caught:
            QueueOptions(max_result_bytes=bad)  # type: ignore[arg-type]
        assert caught.value.field == "max_result_bytes"


async def test_a_failure_stores_the_exception_class_never_its_message(db_url: str) -> None:
    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        raise PaymentDeclined("card 4242 declined for secret-customer")

    async with open_queue(db_url, registry_for(handle)) as queue:
        job_id = (await queue.enqueue(Add(1), dispatch(max_attempts=2))).job_id
        await run_one(queue)
        status = await status_of(queue, job_id)
        assert (status.state, status.last_failure) == (JobState.READY, "HandlerFailed")
        assert status.error_class == f"{__name__}.PaymentDeclined"
        row = repr(
            await queue.store.job_list(
                __import__("caravel.store.protocol").store.protocol.JobFilter()
            )
        )
        assert "secret-customer" not in row


async def test_a_snooze_runs_again_later_without_spending_an_attempt(db_url: str) -> None:
    clock = ManualClock()
    seen: list[int] = []

    async def handle(job: Add, ctx: JobContext[Any]) -> str:
        seen.append(ctx.attempt)
        if len(seen) < 3:
            raise Snooze(timedelta(seconds=30))
        return "done"

    async with open_queue(db_url, registry_for(handle), clock=clock) as queue:
        job_id = (await queue.enqueue(Add(1), dispatch(max_attempts=1))).job_id
        async with QueueWorker(queue) as worker:
            assert await worker.run_once("default")
            status = await status_of(queue, job_id)
            assert (status.state, status.attempt, status.snoozes) == (JobState.READY, 0, 1)
            assert status.due_at == from_ms(clock.now_ms() + 30_000)
            assert status.last_failure is None
            assert await worker.run_once("default") is False  # not before its time
            await clock.advance(timedelta(seconds=30))
            assert await worker.run_once("default")
            await clock.advance(timedelta(seconds=30))
            assert await worker.run_once("default")
        status = await status_of(queue, job_id)
        # Three runs on a budget of one attempt: the snoozes spent none of it.
        assert seen == [1, 1, 1]
        assert (status.state, status.attempt, status.snoozes) == (JobState.COMPLETED, 1, 2)
        assert status.result == "done"


async def test_drain_follows_snoozes_and_reports_them(db_url: str) -> None:
    runs = 0

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            raise Snooze(timedelta(minutes=5))

    async with open_queue(db_url, registry_for(handle)) as queue:
        await queue.enqueue(Add(1), dispatch())
        ran = await drain(queue, advance=True)
        assert [run.outcome for run in ran] == ["snoozed", "completed"]


async def test_snoozing_past_the_limit_dead_letters(db_url: str) -> None:
    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        raise Snooze(timedelta(0))

    async with open_queue(db_url, registry_for(handle)) as queue:
        job_id = (await queue.enqueue(Add(1), dispatch(max_attempts=1))).job_id
        ran = await drain(queue, max_jobs=MAX_SNOOZES + 5)
        assert len(ran) == MAX_SNOOZES + 1
        assert ran[-1].outcome == "dead_letter"
        status = await status_of(queue, job_id)
        assert (status.state, status.snoozes, status.last_failure) == (
            JobState.DEAD_LETTER,
            MAX_SNOOZES,
            FailureCategory.SNOOZE_LIMIT.value,
        )


async def test_discard_dead_letters_now_with_its_category(db_url: str) -> None:
    class Declined(Discard):
        pass

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        if job.amount == 1:
            raise Discard()
        raise Declined("PaymentDeclined")

    async with open_queue(db_url, registry_for(handle)) as queue:
        plain = (await queue.enqueue(Add(1), dispatch(max_attempts=5))).job_id
        named = (await queue.enqueue(Add(2), dispatch(max_attempts=5))).job_id
        ran = await drain(queue)
        assert [run.outcome for run in ran] == ["dead_letter", "dead_letter"]
        first = await status_of(queue, plain)
        assert (first.state, first.attempt, first.last_failure, first.error_class) == (
            JobState.DEAD_LETTER,
            1,
            "Discarded",
            "caravel.directives.Discard",
        )
        second = await status_of(queue, named)
        assert (second.state, second.last_failure) == (JobState.DEAD_LETTER, "PaymentDeclined")
        assert second.error_class is not None
        assert second.error_class.endswith("Declined")


def test_snooze_and_discard_check_their_arguments() -> None:
    for delay in (timedelta(seconds=-1), timedelta(days=31), 5):
        with pytest.raises(ValidationError) as caught:
            Snooze(delay)  # type: ignore[arg-type]
        assert caught.value.field == "delay"
    for category in ("", "9lives", "has space", "x" * 33, None):
        with pytest.raises(ValidationError) as caught:
            Discard(category)  # type: ignore[arg-type]
        assert caught.value.field == "category"


async def test_a_type_retry_policy_overrides_the_queue_defaults(db_url: str) -> None:
    clock = ManualClock()

    async def fails(job: object, ctx: JobContext[Any]) -> None:
        raise ValueError("no")

    registry = JobRegistry()
    registry.register("tests.add.v1", Add, fails)
    policy = RetryPolicy(
        max_attempts=4, base_delay=timedelta(seconds=1), max_delay=timedelta(seconds=3)
    )
    registry.register("tests.other.v1", Other, fails, retry=policy)

    async with open_queue(db_url, registry, clock=clock, max_attempts=2) as queue:
        queue_default = (await queue.enqueue(Add(1), dispatch())).job_id
        typed = (await queue.enqueue(Other(1), dispatch())).job_id
        explicit = (await queue.enqueue(Other(2), dispatch(max_attempts=1))).job_id
        assert (await status_of(queue, queue_default)).max_attempts == 2
        assert (await status_of(queue, typed)).max_attempts == 4
        assert (await status_of(queue, explicit)).max_attempts == 1  # the dispatch still wins

        ran = await drain(queue, advance=True)
        typed_runs = [run for run in ran if run.job_id == typed]
        assert [run.outcome for run in typed_runs] == ["retrying"] * 3 + ["dead_letter"]
        # Its backoff: 1 s, 2 s, then capped at 3 s (the queue's would be 5 s, 10 s).
        # drain moved the clock only to the due times, so the job finished 6 s after its start.
        status = await status_of(queue, typed)
        assert status.finished_at is not None
        assert (status.finished_at - status.created_at) == timedelta(seconds=6)
        assert status.error_class == "builtins.ValueError"


def test_retry_policy_is_validated_like_the_queue_options() -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 101}, "max_attempts"),
        ({"base_delay": timedelta(seconds=1)}, "max_delay"),
        ({"base_delay": timedelta(0), "max_delay": timedelta(seconds=1)}, "base_delay"),
        ({"base_delay": timedelta(seconds=2), "max_delay": timedelta(seconds=1)}, "max_delay"),
        ({"jitter": 1.5}, "jitter"),
        ({"jitter": float("nan")}, "jitter"),
        ({"jitter": True}, "jitter"),
    ]
    for fields, field in cases:
        with pytest.raises(OptionsError) as caught:
            RetryPolicy(**fields)
        assert caught.value.field == field
    registry = JobRegistry()
    with pytest.raises(RegistrationError) as refused:
        registry.register("tests.add.v1", Add, lambda job, ctx: None, retry=3)  # type: ignore[arg-type]
    assert refused.value.field == "retry"
    assert "tests.add.v1" not in registry


def test_jitter_only_shortens_the_delay() -> None:
    policy = RetryPolicy(
        base_delay=timedelta(seconds=10), max_delay=timedelta(seconds=10), jitter=0.5
    )
    delays = {policy.backoff(1, timedelta(seconds=1), timedelta(seconds=1)) for _ in range(50)}
    assert all(timedelta(seconds=5) <= d <= timedelta(seconds=10) for d in delays)
    assert len(delays) > 1


def test_the_sync_facade_reads_results(db_url: str) -> None:
    async def handle(job: Add, ctx: JobContext[Any]) -> list[int]:
        return [job.amount]

    with SyncQueue(db_url, registry_for(handle), clock=ManualClock()) as queue:
        job_id = queue.enqueue(Add(7), dispatch()).job_id
        drain(queue)
        assert queue.get_result(job_id, "default", "tenant-a") == [7]
        assert queue.get_result(job_id, "default", "tenant-b") is None


async def test_the_continuous_worker_writes_results_snoozes_and_discards_in_batches(
    db_url: str,
) -> None:
    count = 60
    finished = asyncio.Event()
    ran: list[int] = []

    def handle(job: Add, ctx: JobContext[Any]) -> object:  # a plain function: a worker thread
        ran.append(job.amount)
        if len(ran) == count:
            finished.set()
        if job.amount % 3 == 1:
            raise Snooze(timedelta(hours=1))
        if job.amount % 3 == 2:
            raise Discard("NotWanted")
        return {"n": job.amount}

    async with (
        open_queue(db_url, registry_for(handle)) as queue,
        QueueWorker(queue, options=WorkerOptions(concurrency=8)) as worker,
    ):
        accepted = await queue.enqueue_many([(Add(n), dispatch()) for n in range(count)])
        task = asyncio.ensure_future(worker.run("default"))
        try:
            await within(finished.wait())
        finally:
            worker.stop()
            await within(task)
        for n, result in enumerate(accepted):
            status = await status_of(queue, result.job_id)
            if n % 3 == 1:
                assert (status.state, status.attempt, status.snoozes) == (JobState.READY, 0, 1)
            elif n % 3 == 2:
                assert (status.state, status.last_failure) == (JobState.DEAD_LETTER, "NotWanted")
            else:
                assert (status.state, status.result) == (JobState.COMPLETED, {"n": n})
