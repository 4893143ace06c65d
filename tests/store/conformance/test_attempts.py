"""The attempt history (``job_attempts``): every outcome a lease holder records writes exactly one
record, in the same transaction, naming the recorder; a fenced-off write records nothing; a claim
that takes over (or dead-letters) an expired lease records that attempt as ``lease_expired``,
naming the worker that held it; a running job's cancel records ``cancelled``. Each job keeps the
records of its last ``attempt_history`` claims, counting the others in ``attempts_dropped``, and
its records go with it when it is deleted or pruned. Reads match id, queue and tenant exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest

from caravel._ids import uuid7
from caravel.attempts import AttemptOutcome, AttemptRecord
from caravel.clock import from_ms
from caravel.flow import ConcurrencyLimit, RateLimit
from caravel.jobs import CancelOutcome, JobState, Lease
from caravel.store.protocol import (
    FailedAttempt,
    JobRef,
    ReadStore,
    Recorder,
    SnoozedAttempt,
    Store,
)
from caravel.store.pruning import PruneRequest
from caravel.store.removal import JobSelection
from tests.store.conformance.builders import (
    LEASE_MS,
    QUEUE,
    T0,
    TENANT,
    claim,
    claim_one,
    insert,
    new_job,
    ref,
    status,
    worker,
)

A = Recorder(uuid7(T0), "host-a.example", 4_001, 20)
B = Recorder(uuid7(T0 + 1), "host-b.example", 4_002, 20)


async def history(store: ReadStore, job_ref: JobRef) -> list[AttemptRecord]:
    found = await store.job_attempts(job_ref)
    assert found is not None, "job not found"
    return found


async def claimed_by(
    store: Store, by: Recorder, now: int = T0, *, lease_ms: int = LEASE_MS, **options: Any
) -> Lease:
    """The one due job claimed at ``now`` by the worker ``by``."""
    return (await claim_one(store, now, lease_ms=lease_ms, worker_id=by.worker_id, **options)).lease


def expected(
    lease: Lease,
    by: Recorder,
    finished_at: int,
    outcome: AttemptOutcome,
    **fields: Any,
) -> AttemptRecord:
    """The record ``lease``'s attempt should have, written by ``by``."""
    return AttemptRecord(
        attempt=lease.attempt,
        lease_token=lease.token,
        outcome=outcome,
        worker_id=by.worker_id,
        host=by.host,
        pid=by.pid,
        claimed_at=from_ms(lease.claimed_at_ms),
        finished_at=from_ms(finished_at),
        **{k: from_ms(v) if k == "retry_at" and v is not None else v for k, v in fields.items()},
    )


# ----- one record per recorded outcome -------------------------------------------------------


async def test_a_job_without_attempts_has_an_empty_history(store: Store) -> None:
    job = new_job()
    await insert(store, [job])
    assert await store.job_attempts(ref(job)) == []
    assert (await status(store, job)).attempts_dropped == 0


async def test_a_completion_records_its_attempt(store: Store) -> None:
    job = new_job()
    await insert(store, [job])
    lease = await claimed_by(store, A)

    assert await store.job_complete_many([lease], T0 + 250, recorder=A) == {job.id}

    [record] = await history(store, ref(job))
    assert record == expected(lease, A, T0 + 250, AttemptOutcome.COMPLETED)
    assert (record.attempt, record.lease_token) == (1, lease.token)
    assert record.duration == timedelta(milliseconds=250)


async def test_a_completion_with_a_result_records_its_attempt(store: Store) -> None:
    job = new_job()
    await insert(store, [job])
    lease = await claimed_by(store, A)

    done = await store.job_complete_many([lease], T0 + 5, results={job.id: "[1]"}, recorder=A)

    assert done == {job.id}
    assert await history(store, ref(job)) == [expected(lease, A, T0 + 5, AttemptOutcome.COMPLETED)]


async def test_a_batch_of_completions_records_one_attempt_each(store: Store) -> None:
    jobs = [new_job(n) for n in range(3)]
    await insert(store, jobs)
    batch = await claim(store, T0, 3, worker_id=A.worker_id)
    leases = [job.lease for job in batch.claimed]
    results = {jobs[1].id: '"one"'}

    assert await store.job_complete_many(leases, T0 + 9, results=results, recorder=A) == {
        job.id for job in jobs
    }

    for lease in leases:
        assert await history(store, JobRef(lease.job_id, QUEUE, TENANT)) == [
            expected(lease, A, T0 + 9, AttemptOutcome.COMPLETED)
        ]


@pytest.mark.parametrize(
    "outcome", [AttemptOutcome.FAILED, AttemptOutcome.TIMED_OUT, AttemptOutcome.DISCARDED]
)
async def test_a_failure_records_its_outcome_class_detail_and_retry(
    store: Store, outcome: AttemptOutcome
) -> None:
    job = new_job()
    await insert(store, [job])
    lease = await claimed_by(store, A)
    retry_at = None if outcome is AttemptOutcome.DISCARDED else T0 + 60_000
    failure = FailedAttempt(
        lease,
        "TimedOut" if outcome is AttemptOutcome.TIMED_OUT else "HandlerFailed",
        retry_at,
        "billing.ProviderDown",
        "provider answered 503",
        outcome,
    )

    assert await store.job_fail_many([failure], T0 + 40, recorder=A) == {job.id}

    assert await history(store, ref(job)) == [
        expected(
            lease,
            A,
            T0 + 40,
            outcome,
            category=failure.category,
            error_class="billing.ProviderDown",
            detail="provider answered 503",
            retry_at=retry_at,
        )
    ]


async def test_a_failure_without_a_class_or_detail_records_none(store: Store) -> None:
    job = new_job(max_attempts=1)
    await insert(store, [job])
    lease = await claimed_by(store, A)

    assert await store.job_fail_many([FailedAttempt(lease, "InvalidPayload", None)], T0 + 1) == {
        job.id
    }

    [record] = await history(store, ref(job))
    assert (record.outcome, record.category, record.error_class, record.detail) == (
        AttemptOutcome.FAILED,
        "InvalidPayload",
        None,
        None,
    )
    assert record.retry_at is None
    # No recorder named: the record names no worker.
    assert (record.worker_id, record.host, record.pid) == (None, None, None)


async def test_a_snooze_and_the_claim_after_it_share_the_attempt_number(store: Store) -> None:
    job = new_job()
    await insert(store, [job])
    first = await claimed_by(store, A)
    until = T0 + 5_000

    assert await store.job_snooze_many([SnoozedAttempt(first, until)], T0 + 10, recorder=A) == {
        job.id
    }
    second = await claimed_by(store, B, until)
    assert await store.job_complete_many([second], until + 20, recorder=B) == {job.id}

    assert await history(store, ref(job)) == [
        expected(first, A, T0 + 10, AttemptOutcome.SNOOZED, retry_at=until),
        expected(second, B, until + 20, AttemptOutcome.COMPLETED),
    ]
    assert first.attempt == second.attempt == 1
    assert first.token < second.token


async def test_retries_record_each_attempt_oldest_first(store: Store) -> None:
    job = new_job(max_attempts=3)
    await insert(store, [job])
    leases: list[Lease] = []
    now = T0
    for n in range(3):
        lease = await claimed_by(store, A, now)
        leases.append(lease)
        retry_at = now + 1_000 if n < 2 else None
        await store.job_fail_many(
            [FailedAttempt(lease, "HandlerFailed", retry_at)], now + 1, recorder=A
        )
        now += 1_000

    records = await history(store, ref(job))
    assert [(r.attempt, r.outcome) for r in records] == [
        (1, AttemptOutcome.FAILED),
        (2, AttemptOutcome.FAILED),
        (3, AttemptOutcome.FAILED),
    ]
    assert [r.lease_token for r in records] == [lease.token for lease in leases]
    assert [r.retry_at for r in records] == [from_ms(T0 + 1_000), from_ms(T0 + 2_000), None]
    assert (await status(store, job)).state is JobState.DEAD_LETTER


# ----- fencing -------------------------------------------------------------------------------


async def test_a_stale_lease_records_nothing(store: Store) -> None:
    job = new_job()
    await insert(store, [job])
    old = await claimed_by(store, A, lease_ms=1_000)
    current = await claimed_by(store, B, T0 + 1_000)
    before = await history(store, ref(job))
    assert [r.outcome for r in before] == [AttemptOutcome.LEASE_EXPIRED]

    assert await store.job_complete_many([old], T0 + 1_001, recorder=A) == set()
    failure = FailedAttempt(old, "HandlerFailed", T0 + 9_000, "x.Y", "detail")
    assert await store.job_fail_many([failure], T0 + 1_002, recorder=A) == set()
    snoozed = SnoozedAttempt(old, T0 + 9_000)
    assert await store.job_snooze_many([snoozed], T0 + 1_003, recorder=A) == set()

    assert await history(store, ref(job)) == before
    # The current holder's outcome is recorded as ever.
    assert await store.job_complete_many([current], T0 + 1_004, recorder=B) == {job.id}
    assert [r.outcome for r in await history(store, ref(job))] == [
        AttemptOutcome.LEASE_EXPIRED,
        AttemptOutcome.COMPLETED,
    ]


async def test_a_batch_records_only_the_leases_it_held(store: Store) -> None:
    held, stale = new_job(0), new_job(1)
    await insert(store, [held, stale])
    leases = {c.job_id: c.lease for c in (await claim(store, T0, 2, lease_ms=1_000)).claimed}
    taken = await claim_one(store, T0 + 1_000, source="expired")  # one of the two, taken over
    stale_job = stale if taken.job_id == stale.id else held
    held_job = held if stale_job is stale else stale

    done = await store.job_complete_many(list(leases.values()), T0 + 1_001, recorder=A)

    assert done == {held_job.id}
    assert [r.outcome for r in await history(store, ref(held_job))] == [AttemptOutcome.COMPLETED]
    assert [r.outcome for r in await history(store, ref(stale_job))] == [
        AttemptOutcome.LEASE_EXPIRED
    ]


# ----- expired leases ------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["expired", "any"])
async def test_a_takeover_records_the_expired_lease_of_the_worker_that_held_it(
    store: Store, source: str
) -> None:
    holder = worker(T0)
    await store.worker_register(holder)
    job = new_job()
    await insert(store, [job])
    lost = await claim_one(store, T0 + 10, lease_ms=1_000, worker_id=holder.id)

    taken = await claim_one(store, T0 + 1_010, source=source, worker_id=B.worker_id)

    assert taken.job_id == job.id
    assert (taken.attempt, taken.lease.token) == (2, lost.lease.token + 1)
    [record] = await history(store, ref(job))
    assert record == AttemptRecord(
        attempt=1,
        lease_token=lost.lease.token,
        outcome=AttemptOutcome.LEASE_EXPIRED,
        worker_id=holder.id,
        host=holder.host,
        pid=holder.pid,
        claimed_at=from_ms(T0 + 10),
        finished_at=from_ms(T0 + 1_010),
        category="LeaseExpired",
    )
    # The new holder's outcome names the new holder; a second takeover names it as the
    # worker that lost its lease.
    third = await claim_one(store, T0 + 40_000, source="expired")
    assert third.job_id == job.id
    records = await history(store, ref(job))
    assert [(r.attempt, r.worker_id, r.host) for r in records] == [
        (1, holder.id, holder.host),
        (2, B.worker_id, None),  # B never registered: its id, no host
    ]


async def test_a_claim_that_dead_letters_an_expired_last_attempt_records_it(
    store: Store,
) -> None:
    job = new_job(max_attempts=1)
    await insert(store, [job])
    lost = await claimed_by(store, A, lease_ms=1_000)

    batch = await claim(store, T0 + 1_000)

    assert (batch.claimed, batch.dead_lettered) == ([], 1)
    assert await history(store, ref(job)) == [
        AttemptRecord(
            attempt=1,
            lease_token=lost.token,
            outcome=AttemptOutcome.LEASE_EXPIRED,
            worker_id=A.worker_id,
            host=None,
            pid=None,
            claimed_at=from_ms(T0),
            finished_at=from_ms(T0 + 1_000),
            category="LeaseExpired",
        )
    ]
    got = await status(store, job)
    assert (got.state, got.last_failure) == (JobState.DEAD_LETTER, "LeaseExpired")


async def test_a_claim_of_ready_jobs_records_nothing(store: Store) -> None:
    jobs = [new_job(n) for n in range(3)]
    await insert(store, jobs)
    await claim(store, T0, 3, source="ready", worker_id=A.worker_id)
    for job in jobs:
        assert await history(store, ref(job)) == []


@pytest.mark.parametrize(
    "limit",
    [
        ConcurrencyLimit(queue=QUEUE, concurrency=5),
        ConcurrencyLimit(queue=QUEUE, per_key=5),
        ConcurrencyLimit(queue=QUEUE, fair=True),
        RateLimit(queue=QUEUE, rate=100, period=timedelta(seconds=1)),
    ],
    ids=["concurrency", "per_key", "fair", "rate"],
)
async def test_a_limited_takeover_records_the_expired_lease(
    store: Store, limit: ConcurrencyLimit | RateLimit
) -> None:
    await store.queue_limit_set(limit, T0)
    job = new_job()
    await insert(store, [job])
    lost = await claimed_by(store, A, lease_ms=1_000, limited=True)

    taken = await claim_one(
        store, T0 + 2_000, source="expired", limited=True, worker_id=B.worker_id
    )

    assert taken.job_id == job.id
    [record] = await history(store, ref(job))
    assert (record.outcome, record.lease_token, record.worker_id) == (
        AttemptOutcome.LEASE_EXPIRED,
        lost.token,
        A.worker_id,
    )
    assert (record.claimed_at, record.finished_at) == (from_ms(T0), from_ms(T0 + 1_000))


# ----- cancels -------------------------------------------------------------------------------


async def test_cancelling_a_running_job_records_its_attempt_as_cancelled(store: Store) -> None:
    holder = worker(T0)
    await store.worker_register(holder)
    running, waiting = new_job(0), new_job(1, due_at=T0 + 60_000)
    await insert(store, [running, waiting])
    lease = (await claim_one(store, T0, worker_id=holder.id)).lease

    assert await store.job_cancel(ref(running), T0 + 30) is CancelOutcome.CANCELLED_RUNNING
    assert await store.job_cancel(ref(waiting), T0 + 30) is CancelOutcome.CANCELLED

    assert await history(store, ref(running)) == [
        AttemptRecord(
            attempt=1,
            lease_token=lease.token,
            outcome=AttemptOutcome.CANCELLED,
            worker_id=holder.id,
            host=holder.host,
            pid=holder.pid,
            claimed_at=from_ms(T0),
            finished_at=from_ms(T0 + 30),
        )
    ]
    assert await history(store, ref(waiting)) == []
    # The worker's later outcome is fenced off, and records nothing.
    assert await store.job_complete_many([lease], T0 + 40, recorder=A) == set()
    assert len(await history(store, ref(running))) == 1


async def test_a_bulk_cancel_records_the_running_jobs_attempts(store: Store) -> None:
    jobs = [new_job(n) for n in range(3)]
    await insert(store, jobs)
    await claim(store, T0, 2, worker_id=A.worker_id)
    selection = JobSelection(QUEUE, (JobState.READY, JobState.RUNNING))

    assert await store.job_cancel_many(selection, T0 + 5, 10) == 3

    outcomes = [[r.outcome for r in await history(store, ref(job))] for job in jobs]
    assert sorted(outcomes) == [[], [AttemptOutcome.CANCELLED], [AttemptOutcome.CANCELLED]]


# ----- the bound -----------------------------------------------------------------------------


async def attempts_of(store: Store, job_id: UUID, count: int, by: Recorder) -> list[Lease]:
    """``count`` claims of the one job, each failed with a retry due at once."""
    leases = []
    for n in range(count):
        now = T0 + n * 10
        lease = (await claim_one(store, now, worker_id=by.worker_id)).lease
        assert lease.job_id == job_id
        failure = FailedAttempt(lease, "HandlerFailed", now + 1)
        await store.job_fail_many([failure], now, recorder=by)
        leases.append(lease)
    return leases


async def test_a_job_keeps_the_records_of_its_last_claims(store: Store) -> None:
    job = new_job(max_attempts=10)
    await insert(store, [job])
    keep = Recorder(A.worker_id, A.host, A.pid, attempt_history=3)

    leases = await attempts_of(store, job.id, 5, keep)

    records = await history(store, ref(job))
    assert [r.lease_token for r in records] == [lease.token for lease in leases[-3:]]
    assert [r.attempt for r in records] == [3, 4, 5]
    assert (await status(store, job)).attempts_dropped == 2


async def test_the_bound_counts_a_takeover_and_a_cancel_too(store: Store) -> None:
    job = new_job(max_attempts=10)
    await insert(store, [job])
    keep = Recorder(A.worker_id, A.host, A.pid, attempt_history=2)
    await attempts_of(store, job.id, 2, keep)
    await claim_one(store, T0 + 100, lease_ms=1_000)
    taken = await claim_one(store, T0 + 2_000, source="expired", attempt_history=2)
    assert (await status(store, job)).attempts_dropped == 1
    assert [r.outcome for r in await history(store, ref(job))] == [
        AttemptOutcome.FAILED,
        AttemptOutcome.LEASE_EXPIRED,
    ]

    # A cancel keeps what the most generous bound keeps: nothing more goes.
    assert await store.job_cancel(ref(job), T0 + 2_001) is CancelOutcome.CANCELLED_RUNNING
    records = await history(store, ref(job))
    assert [r.outcome for r in records][-1] is AttemptOutcome.CANCELLED
    assert records[-1].lease_token == taken.lease.token
    assert (await status(store, job)).attempts_dropped == 1


async def test_with_a_bound_of_one_each_outcome_replaces_the_last(store: Store) -> None:
    job = new_job()
    await insert(store, [job])
    one = Recorder(attempt_history=1)
    first = (await claim_one(store, T0)).lease
    await store.job_snooze_many([SnoozedAttempt(first, T0 + 1)], T0, recorder=one)
    second = (await claim_one(store, T0 + 1)).lease
    await store.job_complete_many([second], T0 + 2, recorder=one)

    [record] = await history(store, ref(job))
    assert (record.lease_token, record.outcome) == (second.token, AttemptOutcome.COMPLETED)
    assert (await status(store, job)).attempts_dropped == 1


# ----- removal -------------------------------------------------------------------------------


async def completed_jobs(store: Store, count: int, *, keyed: bool) -> Sequence[Any]:
    jobs = [new_job(n, key=f"k-{n}" if keyed else None) for n in range(count)]
    await insert(store, jobs)
    leases = [c.lease for c in (await claim(store, T0, count)).claimed]
    assert len(await store.job_complete_many(leases, T0 + 1, recorder=A)) == count
    for job in jobs:
        assert len(await history(store, ref(job))) == 1
    return jobs


@pytest.mark.parametrize("keyed", [False, True], ids=["deleted", "tombstoned"])
async def test_a_pruned_job_takes_its_records_with_it(store: Store, keyed: bool) -> None:
    [job] = await completed_jobs(store, 1, keyed=keyed)
    day = 86_400_000

    batch = await store.job_prune(
        PruneRequest(now=T0 + 10 * day, limit=100, completed_before=T0 + 9 * day)
    )

    assert batch.total == 1
    # A tombstone is what is left of the job: no history.
    assert await store.job_attempts(ref(job)) == ([] if keyed else None)


async def test_a_deleted_job_takes_its_records_with_it(store: Store) -> None:
    one, many_ = await completed_jobs(store, 2, keyed=False)
    assert await store.job_delete(ref(one))
    assert await store.job_attempts(ref(one)) is None
    assert len(await history(store, ref(many_))) == 1
    selection = JobSelection(QUEUE, (JobState.COMPLETED,))
    assert await store.job_delete_many(selection, 10) == 1
    assert await store.job_attempts(ref(many_)) is None


async def test_a_new_job_under_a_deleted_jobs_id_starts_with_no_history(store: Store) -> None:
    [job] = await completed_jobs(store, 1, keyed=False)
    assert await store.job_delete(ref(job))
    again = new_job(job_id=job.id)
    await insert(store, [again])
    assert await store.job_attempts(ref(again)) == []


# ----- reads ---------------------------------------------------------------------------------


async def test_the_history_matches_id_queue_and_tenant_exactly(
    store: Store, reader: ReadStore
) -> None:
    job = new_job()
    await insert(store, [job])
    lease = await claimed_by(store, A)
    await store.job_complete_many([lease], T0 + 3, recorder=A)

    assert len(await history(reader, ref(job))) == 1
    assert await reader.job_attempts(JobRef(job.id, QUEUE, "tenant-b")) is None
    assert await reader.job_attempts(JobRef(job.id, "other", TENANT)) is None
    assert await reader.job_attempts(JobRef(job.id, QUEUE, TENANT.upper())) is None
    assert await reader.job_attempts(JobRef(uuid7(T0), QUEUE, TENANT)) is None
