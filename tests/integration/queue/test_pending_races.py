"""One pending per key under concurrency: producers on separate connections enqueueing the same
key at once, with keep and with replace, leave exactly one pending job and all get its id;
producers racing a worker's claims lose nothing and never see a unique violation; and a retry
whose key a concurrent insert takes gives its key up instead of failing (PostgreSQL, where
writers race; SQLite, with threads on one file, where they queue for the one writer)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from uuid import UUID

import pytest
import sqlalchemy as sa

from caravel import DatabaseQueue, DispatchOptions, EnqueueResult, SyncQueue
from caravel.jobs import JobState
from caravel.store.protocol import ClaimRequest, FailedAttempt, JobRef
from caravel.store.schema import jobs
from caravel.store.urls import sync_url
from caravel.testing import ManualClock
from tests.support import WAIT, Add, dispatch, engine_of, make_registry, open_queue, until
from tests.support.databases import SqliteTemplate

KEY = "sync:account-7"
PRODUCERS = 6
CALLS = 8
#: The calls one producer has in flight at once in the concurrent test: each takes a connection
#: of its own, and the whole suite shares one server's connection limit (100 by default).
IN_FLIGHT = 3


def options(on_pending: str) -> DispatchOptions:
    return dispatch(pending_key=KEY, on_pending=on_pending)


@asynccontextmanager
async def producers(url: str, clock: ManualClock) -> AsyncIterator[list[DatabaseQueue]]:
    """``PRODUCERS`` queues, each with its own connections, as separate processes would be."""
    async with AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(open_queue(url, clock=clock)) for _ in range(PRODUCERS)
        ]


async def ready_rows(queue: DatabaseQueue) -> list[tuple[UUID, str | None]]:
    query = sa.select(jobs.c.id, jobs.c.pending_key).where(jobs.c.state == JobState.READY.value)
    async with engine_of(queue).connect() as conn:
        return [(row.id, row.pending_key) for row in await conn.execute(query)]


@pytest.mark.postgres
@pytest.mark.parametrize("on_pending", ["keep", "replace"])
async def test_concurrent_producers_leave_one_pending_job(pg_url: str, on_pending: str) -> None:
    clock = ManualClock()
    async with producers(pg_url, clock) as queues:

        async def produce(n: int, queue: DatabaseQueue) -> list[EnqueueResult]:
            async def one(m: int) -> EnqueueResult:
                async with slots[n]:
                    return await queue.enqueue(Add(n * CALLS + m), options(on_pending))

            return list(await asyncio.gather(*(one(m) for m in range(CALLS))))

        slots = [asyncio.Semaphore(IN_FLIGHT) for _ in queues]
        batches = await asyncio.wait_for(
            asyncio.gather(*(produce(n, queue) for n, queue in enumerate(queues))), WAIT
        )
        results = [result for batch in batches for result in batch]
        ids = {result.job_id for result in results}
        assert len(ids) == 1
        assert sum(not result.already_enqueued for result in results) == 1
        if on_pending == "replace":
            assert sum(result.replaced for result in results) == len(results) - 1
        assert await ready_rows(queues[0]) == [(ids.pop(), KEY)]


@pytest.mark.postgres
@pytest.mark.parametrize("on_pending", ["keep", "replace"])
async def test_producers_racing_a_worker_lose_nothing(pg_url: str, on_pending: str) -> None:
    clock = ManualClock()
    async with producers(pg_url, clock) as queues:
        store = queues[0].store
        claimed: set[UUID] = set()
        done = asyncio.Event()

        async def produce(queue: DatabaseQueue, n: int) -> list[UUID]:
            found = []
            for m in range(CALLS):
                found.append((await queue.enqueue(Add(n * CALLS + m), options(on_pending))).job_id)
            return found

        async def work() -> None:
            while not done.is_set():
                batch = await store.job_claim_many(
                    ClaimRequest("default", 5, clock.now_ms(), 30_000)
                )
                claimed.update(job.job_id for job in batch.claimed)
                await asyncio.sleep(0)  # let the producers' statements in between claims

        worker = asyncio.ensure_future(work())
        try:
            produced = await asyncio.wait_for(
                asyncio.gather(*(produce(q, n) for n, q in enumerate(queues))), WAIT
            )
        finally:
            done.set()
            await worker
        left = await ready_rows(queues[0])
        assert len(left) <= 1  # at most one pending job under the key
        everything = {job_id for ids in produced for job_id in ids}
        # Every id a producer got is a job that ran or is the one still pending: none lost.
        assert everything == claimed | {job_id for job_id, _ in left}


@pytest.mark.postgres
async def test_a_retry_racing_an_insert_under_its_key_gives_the_key_up(pg_url: str) -> None:
    clock = ManualClock()
    async with open_queue(pg_url, clock=clock) as queue:
        first = await queue.enqueue(Add(1), options("keep"))
        (held,) = (
            await queue.store.job_claim_many(ClaimRequest("default", 1, clock.now_ms(), 30_000))
        ).claimed
        engine = engine_of(queue)
        async with engine.connect() as racing, engine.connect() as watcher:
            # Another producer's transaction holds a new pending job under the key, not yet
            # committed: the retry's update cannot see it, and waits on its index entry.
            racing_job = await queue.enqueue(Add(2), options("keep"), session=racing)
            failing = asyncio.ensure_future(
                queue.store.job_fail_many(
                    [FailedAttempt(held.lease, "HandlerFailed", clock.now_ms() + 1_000)],
                    clock.now_ms(),
                )
            )
            waiting = sa.text(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()"
            )

            async def blocked() -> bool:
                try:
                    return bool((await watcher.execute(waiting)).scalar_one())
                finally:
                    await watcher.rollback()  # a fresh snapshot of the server each time

            await until(blocked, what="the retry to wait on the racing insert's lock")
            await racing.commit()
            assert await asyncio.wait_for(failing, WAIT) == {first.job_id}
        retried = await queue.store.job_get(JobRef(first.job_id, "default", "tenant-a"))
        assert retried is not None
        assert (retried.state, retried.pending_key) == (JobState.READY, None)
        rows = dict(await ready_rows(queue))
        assert rows == {first.job_id: None, racing_job.job_id: KEY}


@pytest.mark.parametrize("on_pending", ["keep", "replace"])
def test_threads_on_one_sqlite_file_leave_one_pending_job(
    sqlite_template: SqliteTemplate, tmp_path: Path, on_pending: str
) -> None:
    sqlite_url = sqlite_template.copy_to(tmp_path / "queue.db")
    results: list[UUID] = []
    errors: list[BaseException] = []
    start = threading.Barrier(PRODUCERS)

    def produce(n: int) -> None:
        try:
            with SyncQueue(sqlite_url, make_registry()) as queue:
                start.wait(WAIT)
                for m in range(CALLS):
                    results.append(queue.enqueue(Add(n * CALLS + m), options(on_pending)).job_id)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(PRODUCERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT * 3)
    assert not errors, errors
    assert len(results) == PRODUCERS * CALLS
    assert len(set(results)) == 1
    engine = sa.create_engine(sync_url(sqlite_url))
    try:
        with engine.connect() as conn:
            count = conn.execute(sa.select(sa.func.count()).select_from(jobs)).scalar_one()
    finally:
        engine.dispose()
    assert count == 1


@pytest.mark.postgres
async def test_batches_of_the_same_keys_in_other_orders_never_deadlock(pg_url: str) -> None:
    clock = ManualClock()
    keys = [f"key-{n}" for n in range(12)]
    async with producers(pg_url, clock) as queues:

        def batch(n: int) -> list[tuple[Add, DispatchOptions]]:
            order = keys if n % 2 == 0 else list(reversed(keys))
            return [(Add(n), dispatch(pending_key=key, on_pending="replace")) for key in order]

        calls = [queue.enqueue_many(batch(n)) for n, queue in enumerate(queues) for _ in range(3)]
        results = await asyncio.wait_for(asyncio.gather(*calls), WAIT)
        rows = await ready_rows(queues[0])
        assert sorted(key for _, key in rows) == sorted(keys)  # one pending job per key
        held = {job_id for job_id, _ in rows}
        assert {result.job_id for found in results for result in found} == held
