"""Retention through the facade, the sync shell and the workers' pruner, on every database:
a pruned keyed job keeps settling repeats and conflicts; bad arguments write nothing; pruning
while a worker drains touches nothing live, and every job completes."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from caravel import (
    DatabaseQueue,
    IdempotencyConflictError,
    JobContext,
    JobState,
    Leases,
    OptionsError,
    PruneBatch,
    QueueOptions,
    QueueWorker,
    Retention,
    SyncQueue,
    ValidationError,
    WorkerOptions,
)
from caravel.store.protocol import JobFilter
from caravel.testing import ManualClock
from caravel.worker.pruner import Pruner
from tests.support import LEASE, Add, dispatch, make_registry, open_queue, registry_for, within

WEEK = Retention(completed=timedelta(days=7), keys=timedelta(days=30))


async def complete_all(queue: DatabaseQueue) -> None:
    leases = Leases(queue)
    while (claimed := await leases.claim("default")) is not None:
        await leases.complete(claimed.lease)


async def everything(queue: DatabaseQueue) -> list[Any]:
    return await queue.store.job_list(JobFilter(limit=10_000, oldest_first=True))


async def test_a_pruned_keyed_job_still_settles_repeats_and_conflicts(db_url: str) -> None:
    clock = ManualClock()
    async with open_queue(db_url, clock=clock) as queue:
        first = await queue.enqueue(Add(1), dispatch("k1"))
        await queue.enqueue(Add(2), dispatch())  # keyless
        await complete_all(queue)
        await clock.advance(timedelta(days=8))

        assert await queue.prune(WEEK) == PruneBatch(deleted=1, tombstoned=1)

        status = await queue.get_status(first.job_id, "default", "tenant-a")
        assert status is not None
        assert status.state is JobState.PRUNED
        assert await queue.get_payload(first.job_id, "default", "tenant-a") is None
        assert await queue.replay(first.job_id, "default", "tenant-a") is False
        again = await queue.enqueue(Add(1), dispatch("k1"))
        assert (again.job_id, again.already_enqueued) == (first.job_id, True)
        with pytest.raises(IdempotencyConflictError) as caught:
            await queue.enqueue(Add(3), dispatch("k1"))
        assert caught.value.job_id == first.job_id
        # Another tenant's same key was never protected by this tombstone.
        other = await queue.enqueue(Add(1), dispatch("k1", tenant="tenant-b"))
        assert other.already_enqueued is False

        await clock.advance(timedelta(days=31))
        assert await queue.prune(WEEK, queue="default") == PruneBatch(tombstones_deleted=1)
        fresh = await queue.enqueue(Add(3), dispatch("k1"))
        assert fresh.already_enqueued is False
        assert fresh.job_id != first.job_id


async def test_retention_is_off_unless_configured(db_url: str) -> None:
    clock = ManualClock()
    async with open_queue(db_url, clock=clock) as queue:
        await queue.enqueue(Add(1), dispatch("k1"))
        await complete_all(queue)
        await clock.advance(timedelta(days=3650))

        assert await queue.prune(Retention()) == PruneBatch()
        assert [s.state for s in await everything(queue)] == [JobState.COMPLETED]


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda q: q.prune(object()), "retention"),
        (lambda q: q.prune(WEEK, limit=0), "limit"),
        (lambda q: q.prune(WEEK, limit=10_001), "limit"),
        (lambda q: q.prune(WEEK, queue="Not A Queue"), "queue"),
        (lambda q: q.prune(WEEK, pause=timedelta(seconds=11)), "pause"),
    ],
)
async def test_bad_arguments_are_refused_before_anything_is_removed(
    db_url: str, call: Any, field: str
) -> None:
    clock = ManualClock()
    async with open_queue(db_url, clock=clock) as queue:
        await queue.enqueue(Add(1), dispatch())
        await complete_all(queue)
        await clock.advance(timedelta(days=8))
        with pytest.raises(ValidationError) as caught:
            await call(queue)
        assert caught.value.field == field
        assert len(await everything(queue)) == 1


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"completed": timedelta(0)}, "completed"),
        ({"keys": timedelta(days=40_000)}, "keys"),
        ({"dead_letter": 7}, "dead_letter"),
    ],
)
def test_a_retention_is_validated_once(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(OptionsError) as caught:
        Retention(**fields)
    assert caught.value.field == field


def test_worker_options_take_a_retention_and_a_bounded_interval() -> None:
    assert WorkerOptions(retention=WEEK).prune_interval == timedelta(hours=1)
    with pytest.raises(OptionsError) as caught:
        WorkerOptions(retention=WEEK, prune_interval=timedelta(seconds=5))
    assert caught.value.field == "prune_interval"
    with pytest.raises(OptionsError) as caught:
        WorkerOptions(retention="7d")  # type: ignore[arg-type]
    assert caught.value.field == "retention"


def test_the_sync_queue_prunes_through_the_same_call(db_url: str) -> None:
    clock = ManualClock()
    with SyncQueue(
        db_url, make_registry(), options=QueueOptions(lease_duration=LEASE), clock=clock
    ) as queue:
        first = queue.enqueue(Add(1), dispatch("k1"))
        queue.call(complete_all, queue.queue)
        queue.call(clock.advance, timedelta(days=8))
        assert queue.prune(WEEK, dry_run=True) == PruneBatch(tombstoned=1)
        assert queue.prune(WEEK) == PruneBatch(tombstoned=1)
        assert queue.enqueue(Add(1), dispatch("k1")).job_id == first.job_id


async def test_the_workers_pruner_runs_a_round_in_batches(db_url: str) -> None:
    clock = ManualClock()
    async with open_queue(db_url, clock=clock) as queue:
        await queue.enqueue_many([(Add(n), dispatch(f"k{n}" if n % 2 else None)) for n in range(7)])
        await complete_all(queue)
        await clock.advance(timedelta(days=8))
        pruner = Pruner(queue.store, clock, WEEK, timedelta(hours=1), limit=3)

        done = await within(pruner.run_once())  # three batches: 3, 3 and a short one

        assert done == PruneBatch(deleted=4, tombstoned=3)
        assert {s.state for s in await everything(queue)} == {JobState.PRUNED}


async def test_pruning_while_a_worker_drains_touches_nothing_live(db_url: str) -> None:
    clock = ManualClock()
    ran: list[int] = []
    all_ran = asyncio.Event()
    total = 200

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        ran.append(job.amount)
        if len(ran) == total:
            all_ran.set()

    async with open_queue(db_url, registry_for(handle), clock=clock) as queue:
        old = [(Add(n), dispatch(f"old-{n}" if n % 2 else None)) for n in range(300)]
        await queue.enqueue_many(old)
        await complete_all(queue)
        await clock.advance(timedelta(days=8))
        new = await queue.enqueue_many(
            [(Add(1000 + n), dispatch(f"new-{n}" if n % 2 else None)) for n in range(total)]
        )
        async with QueueWorker(queue, options=WorkerOptions(concurrency=4)) as worker:
            task = asyncio.ensure_future(worker.run("default"))
            try:
                # Fifteen batches of 20, each its own transaction, between the worker's claims.
                pruned = await queue.prune(WEEK, limit=20)
                await within(all_ran.wait())
            finally:
                worker.stop()
                await within(task)

        assert pruned == PruneBatch(deleted=150, tombstoned=150)
        assert sorted(ran) == [1000 + n for n in range(total)]
        for result in new:
            status = await queue.get_status(result.job_id, "default", "tenant-a")
            assert status is not None
            assert status.state is JobState.COMPLETED
