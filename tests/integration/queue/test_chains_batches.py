"""Chains and batches through the public calls on every database, run by the real worker
(:func:`caravel.testing.drain`): each step is handed the previous step's result, a batch's
callback its counts; and the calls a user can get wrong are refused, naming the field, with
nothing written."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from caravel import BatchOutcome, DispatchOptions, JobContext, JobRegistry, ValidationError
from caravel.jobs import JobState
from caravel.limits import MAX_CHAIN_STEPS
from caravel.queue import DatabaseQueue
from caravel.store.protocol import JobFilter
from caravel.testing import ManualClock, drain
from tests.support import dispatch, open_queue


@dataclasses.dataclass(frozen=True)
class Step:
    n: int


@dataclasses.dataclass(frozen=True)
class Done:
    label: str


class Seen:
    """What the handlers were handed."""

    def __init__(self) -> None:
        self.previous: list[tuple[int, Any]] = []
        self.batches: list[BatchOutcome | None] = []

    async def step(self, job: Step, ctx: JobContext[object]) -> dict[str, int]:
        self.previous.append((job.n, ctx.previous_result))
        if job.n < 0:
            raise RuntimeError("a step that always fails")
        return {"n": job.n, "sum": job.n + ((ctx.previous_result or {}).get("sum", 0))}

    async def done(self, job: Done, ctx: JobContext[object]) -> None:
        self.batches.append(ctx.batch)


def registry_of(seen: Seen) -> JobRegistry:
    registry = JobRegistry()
    registry.register("tests.step.v1", Step, seen.step)
    registry.register("tests.done.v1", Done, seen.done)
    return registry


async def jobs_in(queue: DatabaseQueue) -> int:
    return len(await queue.store.job_list(JobFilter(limit=1_000)))


async def test_each_step_of_a_chain_is_handed_the_previous_result(db_url: str) -> None:
    seen = Seen()
    async with open_queue(db_url, registry_of(seen), clock=ManualClock()) as queue:
        made = await queue.enqueue_chain([(Step(n), dispatch()) for n in (1, 2, 3)])
        assert made.chain_id == made.job_ids[0]
        assert len(made.job_ids) == 3
        before = await queue.get_chain(made.chain_id, "tenant-a")
        assert before is not None
        assert before.state == "running"
        assert [step.held for step in before.steps] == [False, True, True]

        runs = await drain(queue)

        assert [run.job_id for run in runs] == made.job_ids
        assert {run.outcome for run in runs} == {"completed"}
        assert seen.previous == [(1, None), (2, {"n": 1, "sum": 1}), (3, {"n": 2, "sum": 3})]
        after = await queue.get_chain(made.chain_id, "tenant-a")
        assert after is not None
        assert (after.state, after.stopped_at) == ("completed", None)
        assert [step.result["sum"] for step in after.steps] == [1, 3, 6]
        last = await queue.get_status(made.job_ids[-1], "default", "tenant-a")
        assert last is not None
        assert last.result == {"n": 3, "sum": 6}
        assert await queue.get_chain(made.chain_id, "tenant-b") is None


async def test_a_chain_stops_at_a_step_that_fails_for_good(db_url: str) -> None:
    seen = Seen()
    async with open_queue(db_url, registry_of(seen), clock=ManualClock()) as queue:
        once = dispatch(max_attempts=1)
        made = await queue.enqueue_chain([(Step(1), once), (Step(-1), once), (Step(3), once)])

        runs = await drain(queue, advance=True)

        assert [run.outcome for run in runs] == ["completed", "dead_letter"]
        got = await queue.get_chain(made.chain_id, "tenant-a")
        assert got is not None
        assert got.state == "stopped"
        assert got.stopped_at is not None
        assert got.stopped_at.job_id == made.job_ids[1]
        assert got.steps[2].held


async def test_a_batch_callback_is_handed_the_counts(db_url: str) -> None:
    seen = Seen()
    async with open_queue(db_url, registry_of(seen), clock=ManualClock()) as queue:
        once = dispatch(max_attempts=1)
        made = await queue.enqueue_batch(
            [(Step(1), once), (Step(-1), once), (Step(2), once)],
            callback=(Done("all"), dispatch(queue="callbacks")),
        )
        assert made.callback_id is not None
        pending = await queue.get_batch(made.batch_id, "tenant-a")
        assert pending is not None
        assert (pending.total, pending.pending, pending.finished_at) == (3, 3, None)

        runs = await drain(queue, advance=True)

        assert runs[-1].job_id == made.callback_id
        assert sorted(run.outcome for run in runs) == [
            "completed",
            "completed",
            "completed",
            "dead_letter",
        ]
        assert seen.batches == [
            BatchOutcome(batch_id=made.batch_id, total=3, completed=2, failed=1, cancelled=0)
        ]
        got = await queue.get_batch(made.batch_id, "tenant-a")
        assert got is not None
        assert (got.total, got.pending, got.completed, got.failed, got.cancelled) == (
            3,
            0,
            2,
            1,
            0,
        )
        assert got.finished
        assert got.finished_at is not None
        assert await queue.get_batch(made.batch_id, "tenant-b") is None


def _chain_refusals() -> list[tuple[str, list[tuple[object, DispatchOptions]]]]:
    one = (Step(1), dispatch())
    later = timedelta(minutes=5)
    return [
        ("steps", []),
        ("steps", [one] * (MAX_CHAIN_STEPS + 1)),
        ("steps[1].idempotency_key", [one, (Step(2), dispatch("key-2"))]),
        ("steps[0].pending_key", [(Step(1), dispatch(pending_key="p")), one]),
        ("steps[1].pending_key", [one, (Step(2), dispatch(pending_key="p"))]),
        ("steps[1].tenant_id", [one, (Step(2), dispatch(tenant="tenant-b"))]),
        ("steps[1].not_before", [one, (Step(2), dispatch(not_before=_NOW + later))]),
        ("steps[1].delay", [one, (Step(2), dispatch(delay=later))]),
    ]


_NOW = ManualClock().now()


@pytest.mark.parametrize(("field", "steps"), _chain_refusals())
async def test_a_chain_breaking_a_rule_is_refused_and_writes_nothing(
    db_url: str, field: str, steps: list[tuple[object, DispatchOptions]]
) -> None:
    async with open_queue(db_url, registry_of(Seen()), clock=ManualClock()) as queue:
        with pytest.raises(ValidationError) as raised:
            await queue.enqueue_chain(steps)
        assert raised.value.field == field
        assert raised.value.rule
        assert "\n" not in str(raised.value)
        assert await jobs_in(queue) == 0


def _batch_refusals() -> list[tuple[str, list[Any], Any]]:
    one = (Step(1), dispatch())
    done = (Done("x"), dispatch())
    return [
        ("jobs", [], done),
        ("jobs[1].idempotency_key", [one, (Step(2), dispatch("key-2"))], done),
        ("jobs[0].pending_key", [(Step(1), dispatch(pending_key="p"))], done),
        ("callback.tenant_id", [one], (Done("x"), dispatch(tenant="tenant-b"))),
        ("callback.idempotency_key", [one], (Done("x"), dispatch("key-cb"))),
        ("callback.not_before", [one], (Done("x"), dispatch(not_before=_NOW))),
        ("callback.delay", [one], (Done("x"), dispatch(delay=timedelta(seconds=1)))),
        ("jobs[1].tenant_id", [one, (Step(2), dispatch(tenant="tenant-b"))], None),
    ]


@pytest.mark.parametrize(("field", "members", "callback"), _batch_refusals())
async def test_a_batch_breaking_a_rule_is_refused_and_writes_nothing(
    db_url: str, field: str, members: list[Any], callback: Any
) -> None:
    async with open_queue(db_url, registry_of(Seen()), clock=ManualClock()) as queue:
        with pytest.raises(ValidationError) as raised:
            await queue.enqueue_batch(members, callback=callback)
        assert raised.value.field == field
        assert raised.value.rule
        assert "\n" not in str(raised.value)
        assert await jobs_in(queue) == 0
        assert await queue.store.batch_list(10) == []


async def test_a_cancelled_member_counts_and_finishes_the_batch(db_url: str) -> None:
    seen = Seen()
    async with open_queue(db_url, registry_of(seen), clock=ManualClock()) as queue:
        made = await queue.enqueue_batch(
            [(Step(1), dispatch()), (Step(2), dispatch())],
            callback=(Done("all"), dispatch(queue="callbacks")),
        )
        await queue.cancel(made.job_ids[1], "default", "tenant-a")

        await drain(queue)

        assert seen.batches == [
            BatchOutcome(batch_id=made.batch_id, total=2, completed=1, failed=0, cancelled=1)
        ]
        assert made.callback_id is not None
        callback = await queue.get_status(made.callback_id, "callbacks", "tenant-a")
        assert callback is not None
        assert callback.state is JobState.COMPLETED
