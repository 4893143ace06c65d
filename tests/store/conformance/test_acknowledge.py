"""``job_complete_many``, ``job_fail_many`` and ``job_renew_lease``: the writes a lease holder
makes. Each one matches the job id and its current lease token on a running job; any other
lease (superseded, finished, forged) changes nothing and is left out of the answer.
"""

from __future__ import annotations

import dataclasses

import pytest

from caravel.clock import from_ms
from caravel.jobs import JobState, Lease
from caravel.store.protocol import FailedAttempt, NewJob, Store
from tests.store.conformance.builders import (
    LEASE_MS,
    T0,
    claim,
    claim_one,
    fail,
    ids,
    insert,
    many,
    new_job,
    status,
)


async def claimed(store: Store, job: NewJob, now: int = T0, lease_ms: int = LEASE_MS) -> Lease:
    """Insert ``job`` and claim it at ``now``."""
    await insert(store, [job])
    got = await claim_one(store, now, lease_ms=lease_ms)
    assert got.job_id == job.id
    return got.lease


async def superseded(store: Store, job: NewJob) -> tuple[Lease, Lease]:
    """``job`` claimed at T0 for one second, then taken over when that lease expired: the old
    lease and the current one."""
    old = await claimed(store, job, lease_ms=1_000)
    current = await claim_one(store, T0 + 1_000)
    assert current.job_id == job.id
    return old, current.lease


async def test_empty_batches_do_nothing(store: Store) -> None:
    job = new_job()
    await claimed(store, job)
    before = await status(store, job)
    assert await store.job_complete_many([], T0 + 1) == set()
    assert await store.job_fail_many([], T0 + 1) == set()
    assert await status(store, job) == before


async def test_complete_finishes_the_job(store: Store) -> None:
    job = new_job()
    lease = await claimed(store, job)

    assert await store.job_complete_many([lease], T0 + 10) == {job.id}

    got = await status(store, job)
    assert (got.state, got.attempt, got.last_failure) == (JobState.COMPLETED, 1, None)
    assert got.finished_at == got.updated_at == from_ms(T0 + 10)
    assert got.started_at == from_ms(T0)
    assert got.lease_expires_at is None
    # Finished for good: never claimed again, not even once its lease would have ended.
    assert (await claim(store, T0 + 10 * LEASE_MS)).claimed == []
    assert await store.job_complete_many([lease], T0 + 20) == set()
    assert await status(store, job) == got


async def test_complete_answers_only_the_leases_still_held(store: Store) -> None:
    held, stale, done, forged = many(4, keyed=False)
    held_lease = await claimed(store, held)
    old, _ = await superseded(store, stale)
    done_lease = await claimed(store, done)
    assert await store.job_complete_many([done_lease], T0 + 1_000) == {done.id}
    forged_lease = dataclasses.replace(await claimed(store, forged, T0 + 1_000), token=10**9)
    bystanders = [stale, done, forged]
    before = [await status(store, job) for job in bystanders]

    answered = await store.job_complete_many(
        [old, held_lease, done_lease, forged_lease], T0 + 2_000
    )

    assert answered == {held.id}
    assert (await status(store, held)).state is JobState.COMPLETED
    assert [await status(store, job) for job in bystanders] == before


async def test_a_lease_that_expired_but_was_not_taken_over_still_completes(store: Store) -> None:
    # The token is the fence: until another claim takes the job, its lease is still current.
    job = new_job()
    lease = await claimed(store, job, lease_ms=1_000)
    assert await store.job_complete_many([lease], T0 + 5_000) == {job.id}
    assert (await status(store, job)).state is JobState.COMPLETED


async def test_fail_with_a_retry_time_makes_the_job_wait_until_then(store: Store) -> None:
    job = new_job(max_attempts=3)
    lease = await claimed(store, job)

    assert await fail(store, lease, T0 + 10, retry_at=T0 + 5_000) == {job.id}

    got = await status(store, job)
    assert (got.state, got.attempt, got.last_failure) == (JobState.READY, 1, "HandlerFailed")
    assert got.due_at == from_ms(T0 + 5_000)
    assert got.updated_at == from_ms(T0 + 10)
    assert (got.finished_at, got.lease_expires_at) == (None, None)
    assert (await claim(store, T0 + 4_999)).claimed == []
    again = await claim_one(store, T0 + 5_000)
    assert (again.job_id, again.attempt, again.due_at_ms) == (job.id, 2, T0 + 5_000)
    assert again.lease.token != lease.token


async def test_fail_without_a_retry_time_dead_letters(store: Store) -> None:
    job = new_job(due_at=T0 + 3)
    lease = await claimed(store, job, T0 + 3)

    assert await fail(store, lease, T0 + 10, retry_at=None) == {job.id}

    got = await status(store, job)
    assert (got.state, got.attempt, got.last_failure) == (JobState.DEAD_LETTER, 1, "HandlerFailed")
    assert got.finished_at == got.updated_at == from_ms(T0 + 10)
    assert got.due_at == from_ms(T0 + 3)
    assert got.lease_expires_at is None
    assert (await claim(store, T0 + 10 * LEASE_MS)).claimed == []
    assert await store.job_complete_many([lease], T0 + 20) == set()


async def test_fail_many_settles_a_mixed_batch(store: Store) -> None:
    retried, dead, stale = many(3, keyed=False)
    retry_lease = await claimed(store, retried)
    dead_lease = await claimed(store, dead)
    old, current = await superseded(store, stale)
    before = await status(store, stale)

    answered = await store.job_fail_many(
        [
            FailedAttempt(retry_lease, "InvalidPayload", T0 + 9_000),
            FailedAttempt(old, "HandlerFailed", None),
            FailedAttempt(dead_lease, "UnknownJobType", None),
        ],
        T0 + 2_000,
    )

    assert answered == {retried.id, dead.id}
    got_retried, got_dead = await status(store, retried), await status(store, dead)
    assert (got_retried.state, got_retried.last_failure) == (JobState.READY, "InvalidPayload")
    assert got_retried.due_at == from_ms(T0 + 9_000)
    assert (got_dead.state, got_dead.last_failure) == (JobState.DEAD_LETTER, "UnknownJobType")
    assert got_dead.finished_at == from_ms(T0 + 2_000)
    assert await status(store, stale) == before
    assert await store.job_complete_many([current], T0 + 2_000) == {stale.id}


@pytest.mark.parametrize("write", ["complete", "retry", "dead-letter"])
async def test_a_superseded_lease_changes_nothing(store: Store, write: str) -> None:
    job = new_job()
    old, current = await superseded(store, job)
    before = await status(store, job)

    if write == "complete":
        answered = await store.job_complete_many([old], T0 + 1_500)
    else:
        answered = await fail(store, old, T0 + 1_500, T0 + 9_000 if write == "retry" else None)

    assert answered == set()
    assert await status(store, job) == before
    assert await store.job_complete_many([current], T0 + 1_600) == {job.id}


async def test_renewal_extends_a_current_lease(store: Store) -> None:
    job = new_job()
    lease = await claimed(store, job, lease_ms=1_000)

    renewed = await store.job_renew_lease(lease, T0 + 999, T0 + 5_000)

    assert renewed == dataclasses.replace(lease, expires_at_ms=T0 + 5_000)
    got = await status(store, job)
    assert (got.state, got.attempt) == (JobState.RUNNING, 1)
    assert got.lease_expires_at == from_ms(T0 + 5_000)
    assert got.updated_at == from_ms(T0 + 999)
    # Nobody takes the job over after the old expiry, and the renewed lease completes it.
    assert (await claim(store, T0 + 4_999)).claimed == []
    assert await store.job_complete_many([renewed], T0 + 4_999) == {job.id}


async def test_a_renewed_lease_expires_at_its_new_time(store: Store) -> None:
    job = new_job()
    lease = await claimed(store, job, lease_ms=1_000)
    assert await store.job_renew_lease(lease, T0 + 500, T0 + 5_000) is not None
    taken = await claim_one(store, T0 + 5_000)
    assert (taken.job_id, taken.attempt) == (job.id, 2)


async def test_renewal_of_an_expired_lease_is_rejected(store: Store) -> None:
    job = new_job()
    lease = await claimed(store, job, lease_ms=1_000)
    before = await status(store, job)
    assert await store.job_renew_lease(lease, T0 + 1_000, T0 + 5_000) is None
    assert await status(store, job) == before


async def test_renewal_of_a_superseded_lease_is_rejected(store: Store) -> None:
    job = new_job()
    old, current = await superseded(store, job)
    before = await status(store, job)
    assert await store.job_renew_lease(old, T0 + 1_500, T0 + 90_000) is None
    assert await status(store, job) == before
    assert await store.job_renew_lease(current, T0 + 1_500, T0 + 90_000) is not None


@pytest.mark.parametrize("outcome", ["completed", "retried", "dead-lettered"])
async def test_renewal_after_the_attempt_ended_is_rejected(store: Store, outcome: str) -> None:
    job = new_job()
    lease = await claimed(store, job)
    if outcome == "completed":
        assert await store.job_complete_many([lease], T0 + 10) == {job.id}
    else:
        retry_at = T0 + 20 if outcome == "retried" else None
        assert await fail(store, lease, T0 + 10, retry_at) == {job.id}
    before = await status(store, job)

    assert await store.job_renew_lease(lease, T0 + 30, T0 + 90_000) is None

    assert await status(store, job) == before
    if outcome == "retried":  # still waiting for its next attempt, due when it was
        assert ids((await claim(store, T0 + 30)).claimed) == [job.id]
