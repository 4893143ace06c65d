"""Batch counts under concurrent finishers on PostgreSQL and MariaDB, where two processes
really can finish members at once: two stores (two engines, as two worker processes would have)
on one database. (MariaDB releases the callback in the store, not in the trigger: the same
races hold it to exactly once.)

The last two members finished at the same instant by different connections: their
transactions queue on the batch's row, so the second sees the first's count, and the callback
is released exactly once, with the right counts. Two transactions finishing members of two
batches in opposite orders each hold one batch row the other wants: PostgreSQL breaks the
deadlock by rolling one back, and the store runs that one again, so both calls succeed; the
same for two claims that dead-letter expired leases of the two batches.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from uuid import UUID

import psycopg
import pytest

from caravel._ids import uuid7
from caravel.jobs import ClaimedJob, JobState
from caravel.store import open_store
from caravel.store.protocol import Store
from tests.store.conformance.builders import (
    T0,
    claim,
    claim_one,
    insert_batch,
    new_job,
    status,
)
from tests.support import until

ROUNDS = 30
CALLBACKS = "callbacks"
#: How long the test waits for a transaction to block on a lock, or for a statistic to show.
WAIT = 10.0


@asynccontextmanager
async def _two_stores(url: str) -> AsyncIterator[tuple[Store, Store]]:
    first, second = open_store(url), open_store(url)
    try:
        yield first.inner, second.inner
    finally:
        await first.close()
        await second.close()


@pytest.fixture
async def stores(pg_url: str) -> AsyncIterator[tuple[Store, Store]]:
    async with _two_stores(pg_url) as both:
        yield both


@pytest.fixture(
    params=[
        pytest.param("pg_url", id="postgresql", marks=pytest.mark.postgres),
        pytest.param("mariadb_url", id="mariadb", marks=pytest.mark.mariadb),
    ]
)
async def either_stores(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Store, Store]]:
    """:func:`stores` on PostgreSQL and on MariaDB."""
    async with _two_stores(request.getfixturevalue(request.param)) as both:
        yield both


async def test_the_last_two_finishing_at_once_release_the_callback_once(
    either_stores: tuple[Store, Store],
) -> None:
    one, other = either_stores
    for round_ in range(ROUNDS):
        now = T0 + round_ * 1_000
        members = [new_job(n, created_at=now) for n in range(3)]
        callback = new_job(99, queue=CALLBACKS, created_at=now)
        batch = await insert_batch(one, members, callback, created_at=now)
        first = await claim_one(one, now)
        assert await one.job_complete_many([first.lease], now) == {first.job_id}
        a, b = await claim_one(one, now + 1), await claim_one(other, now + 1)

        done = await asyncio.gather(
            one.job_complete_many([a.lease], now + 2),
            other.job_complete_many([b.lease], now + 2),
        )

        assert done == [{a.job_id}, {b.job_id}]
        got = await one.batch_get(batch.id, None)
        assert got is not None
        assert (got.completed, got.dead_letter, got.cancelled, got.finished_at) == (
            3,
            0,
            0,
            now + 2,
        ), round_
        released = await claim(one, now + 2, 10, queue=CALLBACKS)
        assert [job.job_id for job in released.claimed] == [callback.id], round_
        assert json.loads(released.claimed[0].upstream or "")["batch"]["completed"] == 3


async def _waiting_on_locks(conn: psycopg.AsyncConnection[object]) -> int:
    found = await conn.execute(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    row = await found.fetchone()
    return int(row[0]) if row else 0


async def _until(conn: psycopg.AsyncConnection[object], waiting: int) -> None:
    async def blocked() -> bool:
        return await _waiting_on_locks(conn) >= waiting

    await until(blocked, what=f"{waiting} transactions blocked", seconds=WAIT)


async def _deadlocks(conn: psycopg.AsyncConnection[object]) -> int:
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    found = await conn.execute(
        "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
    )
    row = await found.fetchone()
    return int(row[0]) if row else 0


def _by_id(claimed: list[ClaimedJob], job_id: UUID) -> ClaimedJob:
    return next(job for job in claimed if job.job_id == job_id)


async def _opposite_round(
    stores: tuple[Store, Store], pg_url: str, watch: psycopg.AsyncConnection[object], now: int
) -> None:
    """One try at the deadlock: a third connection holds batch X's row while the first call
    finishes members of X then Y (and waits on X), and the second finishes members of Y then X
    (it takes Y's row and waits on X too). Once X is let go, if the first call takes it, it
    wants Y, which the second holds while it waits for X: a cycle, which PostgreSQL breaks by
    rolling one back. (Which waiter the server wakes first is its own affair, so the cycle
    forms in some rounds only.)"""
    one, other = stores
    x_jobs = [new_job(n, created_at=now) for n in (0, 1)]
    y_jobs = [new_job(n, created_at=now) for n in (2, 3)]
    x = await insert_batch(one, x_jobs, new_job(98, queue=CALLBACKS, created_at=now))
    y = await insert_batch(one, y_jobs, new_job(99, queue=CALLBACKS, created_at=now))
    claimed = (await claim(one, now, 4)).claimed
    x1, x2 = (_by_id(claimed, job.id) for job in x_jobs)
    y1, y2 = (_by_id(claimed, job.id) for job in y_jobs)

    async with await psycopg.AsyncConnection.connect(pg_url) as holder:
        await holder.execute("SELECT 1 FROM caravel_batches WHERE id = %s FOR UPDATE", [x.id])
        first = asyncio.ensure_future(one.job_complete_many([x1.lease, y1.lease], now + 10))
        await _until(watch, 1)
        second = asyncio.ensure_future(other.job_complete_many([y2.lease, x2.lease], now + 10))
        await _until(watch, 2)
        await holder.commit()
    done = await asyncio.wait_for(asyncio.gather(first, second), WAIT)

    assert done == [{x1.job_id, y1.job_id}, {x2.job_id, y2.job_id}]
    for batch in (x, y):
        got = await one.batch_get(batch.id, None)
        assert got is not None
        assert (got.completed, got.pending, got.finished_at) == (2, 0, now + 10)
    released = await claim(one, now + 10, 10, queue=CALLBACKS)
    assert sorted(job.job_id for job in released.claimed) == sorted([x.callback_id, y.callback_id])
    for job in [*x_jobs, *y_jobs]:
        assert (await status(one, job)).state is JobState.COMPLETED


@pytest.mark.postgres
async def test_finishing_two_batches_in_opposite_orders_survives_the_deadlock(
    stores: tuple[Store, Store], pg_url: str
) -> None:
    """Rounds of :func:`_opposite_round` until the server has broken a deadlock (it counts
    them): the call it rolled back ran again, and every round's counts are right. A round
    forms the cycle about one time in six here; 60 rounds leave a miss at odds of 1 in 50,000."""
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as watch:
        before = await _deadlocks(watch)
        for round_ in range(60):
            await _opposite_round(stores, pg_url, watch, T0 + round_ * 1_000)
            if await _deadlocks(watch) > before:
                break
        else:
            pytest.fail("no round formed a deadlock")


async def test_concurrent_cross_batch_finishes_keep_every_count(
    either_stores: tuple[Store, Store],
) -> None:
    """Many rounds of the same shape left to chance: whatever order the rows lock in, every
    call succeeds and every batch ends with its counts and its callback released once."""
    one, other = either_stores
    for round_ in range(ROUNDS):
        now = T0 + round_ * 1_000
        x_jobs = [new_job(n, created_at=now) for n in (0, 1)]
        y_jobs = [new_job(n, created_at=now) for n in (2, 3)]
        x = await insert_batch(one, x_jobs, new_job(98, queue=CALLBACKS), created_at=now)
        y = await insert_batch(one, y_jobs, new_job(99, queue=CALLBACKS), created_at=now)
        claimed = (await claim(one, now, 4)).claimed
        x1, x2 = (_by_id(claimed, job.id) for job in x_jobs)
        y1, y2 = (_by_id(claimed, job.id) for job in y_jobs)
        results = {job.job_id: "1" for job in claimed}

        done = await asyncio.gather(
            one.job_complete_many([x1.lease, y1.lease], now + 1, results=results),
            other.job_complete_many([y2.lease, x2.lease], now + 1, results=results),
        )

        assert done == [{x1.job_id, y1.job_id}, {x2.job_id, y2.job_id}], round_
        for batch in (x, y):
            got = await one.batch_get(batch.id, None)
            assert got is not None
            assert (got.completed, got.pending, got.finished_at) == (2, 0, now + 1), round_
        released = await claim(one, now + 1, 10, queue=CALLBACKS)
        assert len(released.claimed) == 2, round_
        assert {json.loads(j.upstream or "")["batch"]["completed"] for j in released.claimed} == {2}


async def _expiring_round(
    stores: tuple[Store, Store], pg_url: str, watch: psycopg.AsyncConnection[object], now: int
) -> None:
    """:func:`_opposite_round` with claims instead of acknowledgements: each claim dead-letters
    two expired leases (their attempts used up), one of each batch, in the order of their ids
    (the claim's update reads them by primary key), X's first for the first queue and Y's first
    for the second."""
    one, other = stores
    ids = [
        uuid7(now + n) for n in range(4)
    ]  # increasing: X1 < Y1 on one queue, Y2 < X2 on the other
    x1, y1 = (new_job(n, queue="q1", job_id=ids[n], created_at=now, max_attempts=1) for n in (0, 1))
    y2, x2 = (new_job(n, queue="q2", job_id=ids[n], created_at=now, max_attempts=1) for n in (2, 3))
    x = await insert_batch(one, [x1, x2], new_job(98, queue=CALLBACKS, created_at=now))
    y = await insert_batch(one, [y1, y2], new_job(99, queue=CALLBACKS, created_at=now))
    for queue in ("q1", "q2"):
        assert len((await claim(one, now, 2, queue=queue, lease_ms=1_000)).claimed) == 2
    expired = now + 1_000

    async with await psycopg.AsyncConnection.connect(pg_url) as holder:
        await holder.execute("SELECT 1 FROM caravel_batches WHERE id = %s FOR UPDATE", [x.id])
        first = asyncio.ensure_future(claim(one, expired, 10, queue="q1"))
        await _until(watch, 1)
        second = asyncio.ensure_future(claim(other, expired, 10, queue="q2"))
        await _until(watch, 2)
        await holder.commit()
    done = await asyncio.wait_for(asyncio.gather(first, second), WAIT)

    assert [(batch.claimed, batch.dead_lettered) for batch in done] == [([], 2), ([], 2)]
    for batch in (x, y):
        got = await one.batch_get(batch.id, None)
        assert got is not None
        assert (got.dead_letter, got.pending, got.finished_at) == (2, 0, expired)
    released = await claim(one, expired, 10, queue=CALLBACKS)
    assert sorted(job.job_id for job in released.claimed) == sorted([x.callback_id, y.callback_id])


@pytest.mark.postgres
async def test_claims_dead_lettering_two_batches_in_opposite_orders_survive_the_deadlock(
    stores: tuple[Store, Store], pg_url: str
) -> None:
    """As for acknowledgements: a claim that dead-letters expired leases updates the batches'
    counts, can be the deadlock's victim, and is run again."""
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as watch:
        before = await _deadlocks(watch)
        for round_ in range(60):
            await _expiring_round(stores, pg_url, watch, T0 + round_ * 10_000)
            if await _deadlocks(watch) > before:
                break
        else:
            pytest.fail("no round formed a deadlock")
