"""A chain or batch given as an iterator longer than its limit is refused after reading at most
one item past the limit: a generator of millions of steps is not drained (and held in memory)
before the refusal. The refusal is the one a list of that length gets, a ``ValidationError``
naming ``steps`` or ``jobs``, and nothing is written; through ``DatabaseQueue``, ``SyncQueue``
and ``caravel.testing.ImmediateQueue`` alike."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from caravel import DispatchOptions, JobRegistry, SyncQueue, ValidationError
from caravel.limits import MAX_BATCH_JOBS, MAX_CHAIN_STEPS
from caravel.queue import DatabaseQueue
from caravel.store.protocol import JobFilter
from caravel.testing import ImmediateQueue, ManualClock
from tests.support import dispatch, open_queue


@dataclasses.dataclass(frozen=True)
class Step:
    n: int


async def step(job: Step, ctx: object) -> None:
    pass


def registry() -> JobRegistry:
    made = JobRegistry()
    made.register("tests.oversized.step.v1", Step, step)
    return made


class Counted(Iterator[tuple[object, DispatchOptions]]):
    """``total`` valid pairs, counting how many the caller pulled."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.pulled = 0

    def __next__(self) -> tuple[object, DispatchOptions]:
        if self.pulled == self.total:
            raise StopIteration
        self.pulled += 1
        return (Step(self.pulled), dispatch())


#: The call, the field its refusal names, and its limit.
CALLS = [("enqueue_chain", "steps", MAX_CHAIN_STEPS), ("enqueue_batch", "jobs", MAX_BATCH_JOBS)]


def oversized(limit: int) -> Counted:
    # Five times the limit: reading it all is the defect; an endless one would hang it.
    return Counted(5 * limit)


async def nothing_written(queue: DatabaseQueue) -> bool:
    jobs = await queue.store.job_list(JobFilter(limit=10))
    return not jobs and not await queue.store.batch_list(10)


async def refusal(queue: DatabaseQueue, call: str, items: Any) -> ValidationError:
    with pytest.raises(ValidationError) as raised:
        await getattr(queue, call)(items)
    return raised.value


@pytest.mark.parametrize(("call", "field", "limit"), CALLS)
async def test_the_async_queue_reads_at_most_one_past_the_limit(
    db_url: str, call: str, field: str, limit: int
) -> None:
    async with open_queue(db_url, registry(), clock=ManualClock()) as queue:
        items = oversized(limit)
        refused = await refusal(queue, call, items)
        assert items.pulled <= limit + 1
        as_list = await refusal(queue, call, list(Counted(limit + 1)))
        assert (refused.field, refused.rule) == (as_list.field, as_list.rule)
        assert refused.field == field
        assert await nothing_written(queue)


@pytest.mark.parametrize(("call", "field", "limit"), CALLS)
async def test_immediate_mode_reads_at_most_one_past_the_limit(
    db_url: str, call: str, field: str, limit: int
) -> None:
    async with ImmediateQueue(registry(), target=db_url, clock=ManualClock()) as queue:
        items = oversized(limit)
        refused = await refusal(queue, call, items)
        assert items.pulled <= limit + 1
        assert refused.field == field
        assert await nothing_written(queue)
        assert queue.runs == []


@pytest.mark.parametrize(("call", "field", "limit"), CALLS)
def test_the_sync_queue_reads_at_most_one_past_the_limit(
    db_url: str, call: str, field: str, limit: int
) -> None:
    with SyncQueue(db_url, registry(), clock=ManualClock()) as queue:
        items = oversized(limit)
        with pytest.raises(ValidationError) as raised:
            getattr(queue, call)(items)
        assert items.pulled <= limit + 1
        assert raised.value.field == field
        assert queue.call(nothing_written, queue.queue)


async def test_an_iterator_of_exactly_the_limit_is_a_whole_chain(db_url: str) -> None:
    async with open_queue(db_url, registry(), clock=ManualClock()) as queue:
        made = await queue.enqueue_chain(Counted(MAX_CHAIN_STEPS))
        assert len(made.job_ids) == MAX_CHAIN_STEPS
