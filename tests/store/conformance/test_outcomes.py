"""What a lease holder stores with an attempt's end besides its state: the handler's result on
completion, the exception class on failure, and snoozes (``job_snooze_many``), each fenced by
the lease like every other acknowledgement."""

from __future__ import annotations

import dataclasses
import json

from caravel.clock import from_ms
from caravel.jobs import JobState, Lease
from caravel.store.protocol import FailedAttempt, JobFilter, JobRef, NewJob, SnoozedAttempt, Store
from tests.store.conformance.builders import (
    LEASE_MS,
    T0,
    claim,
    claim_one,
    insert,
    many,
    new_job,
    ref,
    status,
)


async def claimed(store: Store, job: NewJob, now: int = T0, lease_ms: int = LEASE_MS) -> Lease:
    await insert(store, [job])
    got = await claim_one(store, now, lease_ms=lease_ms)
    assert got.job_id == job.id
    return got.lease


async def test_a_result_is_stored_with_its_completion_and_read_back(store: Store) -> None:
    with_result, without = many(2, keyed=False)
    first = await claimed(store, with_result)
    second = await claimed(store, without)
    text = json.dumps({"total": 3, "name": "Zoë"}, ensure_ascii=False)

    done = await store.job_complete_many([first, second], T0 + 10, results={with_result.id: text})

    assert done == {with_result.id, without.id}
    assert await store.job_get_result(ref(with_result)) == text
    assert await store.job_get_result(ref(without)) is None
    got = await status(store, with_result)
    assert got.state is JobState.COMPLETED
    assert got.result == {"total": 3, "name": "Zoë"}
    assert (await status(store, without)).result is None


async def test_listings_leave_results_out(store: Store) -> None:
    job = new_job()
    lease = await claimed(store, job)
    await store.job_complete_many([lease], T0 + 10, results={job.id: "[1,2]"})
    (listed,) = await store.job_list(JobFilter())
    assert listed.job_id == job.id
    assert listed.result is None


async def test_a_result_is_fenced_by_the_lease(store: Store) -> None:
    job = new_job()
    old = await claimed(store, job, lease_ms=1_000)
    current = (await claim_one(store, T0 + 1_000)).lease

    assert await store.job_complete_many([old], T0 + 1_100, results={job.id: '"stale"'}) == set()
    assert await store.job_get_result(ref(job)) is None
    assert (await status(store, job)).state is JobState.RUNNING

    assert await store.job_complete_many([current], T0 + 1_200, results={job.id: '"new"'}) == {
        job.id
    }
    assert await store.job_get_result(ref(job)) == '"new"'


async def test_a_result_is_read_only_by_its_exact_queue_and_tenant(store: Store) -> None:
    job = new_job()
    lease = await claimed(store, job)
    await store.job_complete_many([lease], T0 + 10, results={job.id: "1"})
    assert await store.job_get_result(JobRef(job.id, job.queue, job.tenant_id.upper())) is None
    assert await store.job_get_result(JobRef(job.id, "other", job.tenant_id)) is None
    assert await store.job_get_result(ref(job)) == "1"


async def test_a_failure_stores_the_exception_class_and_a_later_one_without_keeps_it(
    store: Store,
) -> None:
    job = new_job(max_attempts=3)
    lease = await claimed(store, job)
    failure = FailedAttempt(lease, "HandlerFailed", T0 + 100, "myapp.errors.PaymentDeclined")

    assert await store.job_fail_many([failure], T0 + 10) == {job.id}
    got = await status(store, job)
    assert (got.last_failure, got.error_class) == ("HandlerFailed", "myapp.errors.PaymentDeclined")

    again = (await claim_one(store, T0 + 100)).lease
    await store.job_fail_many([FailedAttempt(again, "InvalidPayload", None)], T0 + 200)
    got = await status(store, job)
    assert (got.state, got.last_failure) == (JobState.DEAD_LETTER, "InvalidPayload")
    assert got.error_class == "myapp.errors.PaymentDeclined"


async def test_a_stale_failure_stores_no_exception_class(store: Store) -> None:
    job = new_job(max_attempts=3)
    old = await claimed(store, job, lease_ms=1_000)
    await claim_one(store, T0 + 1_000)
    stale = FailedAttempt(old, "HandlerFailed", T0 + 5_000, "builtins.ValueError")
    assert await store.job_fail_many([stale], T0 + 1_100) == set()
    assert (await status(store, job)).error_class is None


async def test_replay_forgets_the_exception_class_and_the_snoozes(store: Store) -> None:
    job = new_job(max_attempts=2)
    lease = await claimed(store, job)
    await store.job_snooze_many([SnoozedAttempt(lease, T0 + 50)], T0 + 10)
    lease = (await claim_one(store, T0 + 50)).lease
    dead = FailedAttempt(lease, "Discarded", None, "caravel.directives.Discard")
    await store.job_fail_many([dead], T0 + 60)
    assert (await status(store, job)).snoozes == 1

    assert await store.job_replay(ref(job), T0 + 100)
    got = await status(store, job)
    assert (got.state, got.error_class, got.snoozes, got.last_failure) == (
        JobState.READY,
        None,
        0,
        None,
    )


async def test_a_snooze_gives_the_attempt_back_and_waits(store: Store) -> None:
    job = new_job(max_attempts=1)
    lease = await claimed(store, job)
    assert lease.attempt == 1

    assert await store.job_snooze_many([SnoozedAttempt(lease, T0 + 5_000)], T0 + 10) == {job.id}

    got = await status(store, job)
    assert (got.state, got.attempt, got.snoozes, got.last_failure) == (
        JobState.READY,
        0,
        1,
        None,
    )
    assert got.due_at == from_ms(T0 + 5_000)
    assert (got.lease_expires_at, got.finished_at) == (None, None)
    assert got.updated_at == from_ms(T0 + 10)
    assert (await claim(store, T0 + 4_999)).claimed == []
    again = await claim_one(store, T0 + 5_000)
    # Its one attempt is still there to use, and the claim says how often it snoozed.
    assert (again.job_id, again.attempt, again.snoozes) == (job.id, 1, 1)
    assert again.lease.token != lease.token


async def test_a_snooze_is_fenced_by_the_lease(store: Store) -> None:
    job, bystander = many(2, keyed=False)
    old = await claimed(store, job, lease_ms=1_000)
    current = (await claim_one(store, T0 + 1_000)).lease
    held = await claimed(store, bystander, T0 + 1_000)
    before = await status(store, job)

    answered = await store.job_snooze_many(
        [SnoozedAttempt(old, T0 + 9_000), SnoozedAttempt(held, T0 + 9_000)], T0 + 1_100
    )

    assert answered == {bystander.id}
    assert await status(store, job) == before
    assert current.token != old.token
    assert await store.job_snooze_many([], T0 + 1_200) == set()


async def test_a_snoozed_job_is_not_completed_by_its_old_lease(store: Store) -> None:
    job = new_job()
    lease = await claimed(store, job)
    await store.job_snooze_many([SnoozedAttempt(lease, T0 + 10)], T0 + 5)
    assert await store.job_complete_many([lease], T0 + 6, results={job.id: "1"}) == set()
    got = await status(store, job)
    assert (got.state, got.result) == (JobState.READY, None)


async def test_a_batch_stores_each_result_with_its_own_job(store: Store) -> None:
    jobs = many(5, keyed=False)
    leases = [await claimed(store, job) for job in jobs]
    results = {job.id: json.dumps([index, "r"]) for index, job in enumerate(jobs) if index != 2}
    stale = dataclasses.replace(leases[4], token=leases[4].token + 7)

    done = await store.job_complete_many([*leases[:4], stale], T0 + 10, results=results)

    assert done == {job.id for job in jobs[:4]}
    assert [await store.job_get_result(ref(job)) for job in jobs] == [
        json.dumps([0, "r"]),
        json.dumps([1, "r"]),
        None,
        json.dumps([3, "r"]),
        None,  # its lease was forged: nothing stored
    ]
