"""Fair dispatch end to end in one process: fairness declared on the registry and stored by the
worker when it starts, and a running worker claiming a small tenant's jobs beside a large
tenant's backlog, within its first claims, on every database; without fairness the same small
tenant waits for the whole backlog."""

from __future__ import annotations

import asyncio
from typing import Any

from caravel import ConcurrencyLimit, DatabaseQueue, JobContext, QueueWorker, WorkerOptions
from tests.support import Add, dispatch, open_queue, registry_for, within

BACKLOG = 600
SMALL = 5
#: Claims of five (half the slots): the small tenant's jobs fit in the first claims.
OPTIONS = WorkerOptions(concurrency=10)


async def _started_order(db_url: str, *, fair: bool, options: WorkerOptions = OPTIONS) -> list[str]:
    started: list[str] = []
    done = asyncio.Event()

    async def record(job: Add, ctx: JobContext[Any]) -> None:
        started.append(ctx.tenant_id)
        if started.count("small") == SMALL:
            done.set()

    registry = registry_for(record)
    if fair:
        registry.limit(ConcurrencyLimit(queue="default", fair=True))
    queue: DatabaseQueue
    async with open_queue(db_url, registry) as queue:
        await queue.enqueue_many([(Add(n), dispatch(tenant="big")) for n in range(BACKLOG)])
        for n in range(SMALL):
            await queue.enqueue(Add(n), dispatch(tenant="small"))
        async with QueueWorker(queue, options=options) as worker:
            task = asyncio.create_task(worker.run(["default"]))
            await within(done.wait())
            worker.stop()
            await within(task)
        if fair:
            (stored,) = await queue.store.queue_limit_list()
            assert stored.fair is True
    return started


async def test_a_small_tenant_starts_within_the_first_claims_of_a_fair_queue(
    db_url: str,
) -> None:
    started = await _started_order(db_url, fair=True)
    last = max(i for i, tenant in enumerate(started) if tenant == "small")
    # Each claim of five takes both tenants in turn: the five small jobs are among the first
    # claims' jobs, not behind the backlog.
    assert last < 4 * SMALL


async def test_a_worker_of_one_slot_alternates_between_the_tenants(db_url: str) -> None:
    # One slot: no job of either tenant runs when the worker claims, so only the queue's cursor
    # makes the tenants take turns.
    started = await _started_order(db_url, fair=True, options=WorkerOptions(concurrency=1))
    assert started[: 2 * SMALL] == ["big", "small"] * SMALL


async def test_without_fairness_the_small_tenant_waits_for_the_backlog(db_url: str) -> None:
    started = await _started_order(db_url, fair=False)
    assert started.index("small") == BACKLOG
