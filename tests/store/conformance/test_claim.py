"""``job_claim_many``: which jobs a claim takes, in what order, and what it does to them.

A claim takes due jobs of its queue only, up to ``limit``: waiting jobs by rank (the due time
moved earlier by priority, see ``test_priority``), running jobs whose lease expired by expiry,
and ``"any"`` those expired leases first, then waiting jobs; each claim spends an attempt and
changes the lease token; a lease that expired with no attempts left is dead-lettered instead.
"""

from __future__ import annotations

import asyncio

import pytest

from caravel.clock import from_ms
from caravel.jobs import FailureCategory, JobState
from caravel.store.protocol import ClaimBatch, ClaimSource, Store
from tests.store.conformance.builders import (
    LEASE_MS,
    T0,
    claim,
    claim_one,
    everything,
    ids,
    insert,
    many,
    new_job,
    status,
)


async def test_a_claim_on_an_empty_queue_returns_nothing(store: Store) -> None:
    assert await claim(store, T0) == ClaimBatch(claimed=[], dead_lettered=0)


async def test_a_claim_leases_the_due_jobs_of_its_queue_only(store: Store) -> None:
    due = [new_job(n, due_at=T0 + 10 * n, max_attempts=4) for n in range(3)]
    later = new_job(10, due_at=T0 + 1_000)
    elsewhere = new_job(11, queue="other")
    await insert(store, [*due, later, elsewhere])
    now = T0 + 500

    batch = await claim(store, now, 10)

    assert batch.dead_lettered == 0
    assert ids(batch.claimed) == ids(due)
    for job, claimed in zip(due, batch.claimed, strict=True):
        assert (claimed.queue, claimed.tenant_id, claimed.job_type, claimed.payload) == (
            job.queue,
            job.tenant_id,
            job.job_type,
            job.payload,
        )
        assert claimed.due_at_ms == job.due_at
        lease = claimed.lease
        assert (lease.job_id, lease.attempt, lease.max_attempts) == (job.id, 1, 4)
        assert (lease.claimed_at_ms, lease.expires_at_ms) == (now, now + LEASE_MS)
        got = await status(store, job)
        assert (got.state, got.attempt) == (JobState.RUNNING, 1)
        assert got.started_at == got.updated_at == from_ms(now)
        assert got.lease_expires_at == from_ms(now + LEASE_MS)
        assert got.due_at == from_ms(job.due_at)
        assert (got.finished_at, got.last_failure) == (None, None)
    for untouched in (later, elsewhere):
        assert (await status(store, untouched)).state is JobState.READY
    assert ids((await claim(store, now, 10, queue="other")).claimed) == [elsewhere.id]


async def test_the_limit_takes_the_oldest_due_first(store: Store) -> None:
    offsets = [40, 10, 30, 0, 20]
    jobs = [new_job(n, due_at=T0 + offset) for n, offset in enumerate(offsets)]
    await insert(store, jobs)
    by_due = sorted(jobs, key=lambda job: job.due_at)
    now = T0 + 100

    rounds = [ids((await claim(store, now, 2)).claimed) for _ in range(4)]

    assert rounds == [ids(by_due[0:2]), ids(by_due[2:4]), ids(by_due[4:]), []]


async def test_a_job_is_claimable_from_its_due_time(store: Store) -> None:
    job = new_job(due_at=T0 + 1_000)
    await insert(store, [job])
    assert (await claim(store, T0 + 999)).claimed == []
    assert ids((await claim(store, T0 + 1_000)).claimed) == [job.id]


async def test_an_expired_lease_is_claimable_again_with_a_new_token(store: Store) -> None:
    job = new_job(max_attempts=3)
    await insert(store, [job])
    first = await claim_one(store, T0, lease_ms=1_000)

    assert (await claim(store, T0 + 999)).claimed == []  # the lease still holds
    second = await claim_one(store, T0 + 1_000, lease_ms=1_000)
    third = await claim_one(store, T0 + 2_000, lease_ms=5_000)

    assert [c.job_id for c in (first, second, third)] == [job.id] * 3
    assert [c.attempt for c in (first, second, third)] == [1, 2, 3]
    assert len({c.lease.token for c in (first, second, third)}) == 3
    assert (third.lease.claimed_at_ms, third.lease.expires_at_ms) == (T0 + 2_000, T0 + 7_000)
    got = await status(store, job)
    assert (got.state, got.attempt) == (JobState.RUNNING, 3)
    assert got.started_at == from_ms(T0 + 2_000)
    assert got.lease_expires_at == from_ms(T0 + 7_000)


#: For each source, which of the three jobs below a claim takes.
TAKES: dict[ClaimSource, set[str]] = {
    "ready": {"waiting"},
    "expired": {"crashed"},
    "any": {"waiting", "crashed"},
}


@pytest.mark.parametrize("source", list(TAKES))
async def test_the_source_picks_waiting_jobs_or_expired_leases(
    store: Store, source: ClaimSource
) -> None:
    jobs = {
        "crashed": new_job(1),  # claimed, lease expired, attempts left
        "busy": new_job(2),  # claimed, lease still held
        "waiting": new_job(3, due_at=T0 + 50),
    }
    await insert(store, list(jobs.values()))
    assert ids((await claim(store, T0, 1, lease_ms=100)).claimed) == [jobs["crashed"].id]
    assert ids((await claim(store, T0, 1, lease_ms=10_000)).claimed) == [jobs["busy"].id]
    now = T0 + 200
    before = {name: await status(store, job) for name, job in jobs.items()}

    batch = await claim(store, now, 10, source=source)

    taken = {name for name, job in jobs.items() if job.id in ids(batch.claimed)}
    assert taken == TAKES[source]
    assert batch.dead_lettered == 0
    for claimed in batch.claimed:
        assert claimed.lease.claimed_at_ms == now
    for name, job in jobs.items():
        if name not in taken:
            assert await status(store, job) == before[name]
    if "crashed" in taken:
        assert (await status(store, jobs["crashed"])).attempt == 2


@pytest.mark.parametrize("expires_in", [3_000, 10_000])
async def test_any_takes_expired_leases_before_waiting_jobs(store: Store, expires_in: int) -> None:
    # A crashed worker's job is available from its lease expiry, a waiting job from its due
    # time; "any" takes expired leases first, whichever became available first.
    crashed, waiting = new_job(1), new_job(2, due_at=T0 + 5_000, priority=100)
    await insert(store, [crashed, waiting])
    await claim_one(store, T0, lease_ms=expires_in)

    taken = [ids((await claim(store, T0 + 20_000, 1)).claimed) for _ in range(3)]

    assert taken == [[crashed.id], [waiting.id], []]
    another = new_job(3, due_at=T0 + 20_000)
    await insert(store, [another])
    batch = await claim(store, T0 + 60_000, 5)  # both leases expired again, and one more job
    assert set(ids(batch.claimed[:2])) == {crashed.id, waiting.id}
    assert ids(batch.claimed[2:]) == [another.id]


@pytest.mark.parametrize("source", ["any", "expired"])
async def test_an_expired_lease_with_no_attempts_left_is_dead_lettered(
    store: Store, source: ClaimSource
) -> None:
    job = new_job(max_attempts=1)
    await insert(store, [job])
    lease = (await claim_one(store, T0, lease_ms=1_000)).lease
    assert await claim(store, T0 + 1_000, source="ready") == ClaimBatch([], 0)
    assert (await status(store, job)).state is JobState.RUNNING

    batch = await claim(store, T0 + 1_000, source=source)

    assert batch == ClaimBatch(claimed=[], dead_lettered=1)
    got = await status(store, job)
    assert (got.state, got.attempt, got.last_failure) == (
        JobState.DEAD_LETTER,
        1,
        FailureCategory.LEASE_EXPIRED.value,
    )
    assert got.finished_at == got.updated_at == from_ms(T0 + 1_000)
    assert got.lease_expires_at is None
    assert await claim(store, T0 + 5_000) == ClaimBatch([], 0)  # counted once
    assert await store.job_complete_many([lease], T0 + 5_000) == set()
    assert (await status(store, job)).state is JobState.DEAD_LETTER


async def test_one_claim_dead_letters_exhausted_leases_and_claims_the_rest(store: Store) -> None:
    exhausted = many(2, keyed=False, max_attempts=1)
    await insert(store, exhausted)
    assert len((await claim(store, T0, 2, lease_ms=1_000)).claimed) == 2
    waiting = [new_job(10, due_at=T0 + 2_000), new_job(11, due_at=T0 + 2_001)]
    await insert(store, waiting)

    batch = await claim(store, T0 + 3_000, 10)

    assert ids(batch.claimed) == ids(waiting)
    assert batch.dead_lettered == 2
    for job in exhausted:
        assert (await status(store, job)).state is JobState.DEAD_LETTER


async def test_concurrent_claims_never_return_the_same_job(
    store: Store, second_store: Store
) -> None:
    jobs = many(30, keyed=False)
    await insert(store, jobs)

    batches = await asyncio.gather(
        *(claim(each, T0, 7) for each in (store, second_store, store, second_store))
    )
    claimed = [job for batch in batches for job in batch.claimed]
    while rest := (await claim(store, T0, 7)).claimed:
        claimed.extend(rest)

    assert sorted(ids(claimed)) == sorted(ids(jobs))  # every job exactly once
    # Every lease handed out is the job's current one.
    leases = [job.lease for job in claimed]
    assert await store.job_complete_many(leases, T0 + 1) == set(ids(jobs))
    assert {s.state for s in await everything(store)} == {JobState.COMPLETED}
