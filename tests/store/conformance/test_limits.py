"""``queue_limit_set``, ``queue_limit_clear``, ``queue_limit_list`` and the limited claim: a
limit replaces the queue's previous one and a clear removes it; bad input is refused with the
field named and nothing stored; a limited claim never leaves more jobs running than the stored
limits allow, overall and per partition key (the tenant unless the job names another), counting
a job as running only while its lease lasts, however many claims run at once. A plain claim
reads no limit: which claim to send is the worker's decision."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence

import pytest

from caravel.errors import ValidationError
from caravel.flow import ConcurrencyLimit
from caravel.jobs import ClaimedJob, JobState
from caravel.store.protocol import NewJob, QueueLimit, ReadStore, Store
from tests.store.conformance.builders import (
    LEASE_MS,
    QUEUE,
    T0,
    TENANT,
    claim,
    insert,
    new_job,
    status,
)


def _limit(concurrency: int | None = None, per_key: int | None = None) -> ConcurrencyLimit:
    return ConcurrencyLimit(queue=QUEUE, concurrency=concurrency, per_key=per_key)


async def _claimed(store: Store, now: int, limit: int = 50, **options: object) -> list[ClaimedJob]:
    return (await claim(store, now, limit, limited=True, **options)).claimed  # type: ignore[arg-type]


def _keys(claimed: Sequence[ClaimedJob], keys: dict[object, str]) -> Counter[str]:
    return Counter(keys[job.job_id] for job in claimed)


# ----- storing limits -------------------------------------------------------------------------


async def test_no_queue_has_a_limit_at_first(store: Store, reader: ReadStore) -> None:
    assert await store.queue_limit_list() == []
    assert await reader.queue_limit_list() == []


async def test_a_limit_is_stored_replaced_and_cleared(store: Store, reader: ReadStore) -> None:
    stored = await store.queue_limit_set(_limit(10, 2), T0)
    assert stored == QueueLimit(QUEUE, 10, 2, T0)
    assert await reader.queue_limit_list() == [stored]
    # Setting again replaces the whole limit: a cap left out is removed.
    assert await store.queue_limit_set(_limit(per_key=3), T0 + 5) == QueueLimit(
        QUEUE, None, 3, T0 + 5
    )
    assert await store.queue_limit_list() == [QueueLimit(QUEUE, None, 3, T0 + 5)]

    assert await store.queue_limit_clear(QUEUE, T0 + 10) is True
    assert await store.queue_limit_list() == []
    assert await store.queue_limit_clear(QUEUE, T0 + 11) is False


async def test_limits_are_per_queue_listed_by_name_and_seen_by_every_store(
    store: Store, second_store: Store
) -> None:
    for at, name in enumerate(["reports", "emails", "billing"]):
        await store.queue_limit_set(ConcurrencyLimit(queue=name, concurrency=at + 1), T0)
    await second_store.queue_limit_clear("emails", T0 + 1)
    assert await second_store.queue_limit_list() == [
        QueueLimit("billing", 3, None, T0),
        QueueLimit("reports", 1, None, T0),
    ]


def _forced(**fields: object) -> ConcurrencyLimit:
    """A limit with ``fields`` forced past its own checks, as a careless caller could."""
    limit = _limit(5, 2)
    for name, value in fields.items():
        object.__setattr__(limit, name, value)
    return limit


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": -1}, "concurrency"),
        ({"per_key": 0}, "per_key"),
        ({"per_key": -3}, "per_key"),
        ({"per_key": True}, "per_key"),
        ({"concurrency": 100_001}, "concurrency"),
        ({"concurrency": None, "per_key": None}, "concurrency"),
        ({"queue": "Not A Queue"}, "queue"),
        ({"queue": ""}, "queue"),
    ],
)
async def test_a_bad_limit_is_refused_naming_the_field_and_nothing_is_stored(
    store: Store, fields: dict[str, object], field: str
) -> None:
    await store.queue_limit_set(_limit(7), T0)
    with pytest.raises(ValidationError) as raised:
        await store.queue_limit_set(_forced(**fields), T0 + 1)
    assert raised.value.field == field
    # The same rule holds when the limit is constructed.
    args = {"queue": QUEUE, "concurrency": 5, "per_key": 2, **fields}
    with pytest.raises(ValidationError) as constructed:
        ConcurrencyLimit(**args)  # type: ignore[arg-type]
    assert constructed.value.field == field
    assert await store.queue_limit_list() == [QueueLimit(QUEUE, 7, None, T0)]


async def test_what_is_not_a_limit_and_a_bad_queue_to_clear_are_refused(store: Store) -> None:
    await store.queue_limit_set(_limit(7), T0)
    with pytest.raises(ValidationError) as raised:
        await store.queue_limit_set({"queue": QUEUE, "concurrency": 1}, T0)  # type: ignore[arg-type]
    assert raised.value.field == "limit"
    with pytest.raises(ValidationError) as cleared:
        await store.queue_limit_clear("Bad Queue", T0)
    assert cleared.value.field == "queue"
    assert await store.queue_limit_list() == [QueueLimit(QUEUE, 7, None, T0)]


# ----- the overall limit ----------------------------------------------------------------------


async def test_a_limited_claim_leaves_at_most_the_limit_running(store: Store) -> None:
    await insert(store, [new_job(n) for n in range(10)])
    await store.queue_limit_set(_limit(3), T0)

    first = await _claimed(store, T0 + 1)
    assert len(first) == 3
    assert await _claimed(store, T0 + 2) == []
    # A finished job gives its slot back, and only its slot.
    assert await store.job_complete_many([first[0].lease], T0 + 3) == {first[0].job_id}
    assert len(await _claimed(store, T0 + 4)) == 1
    assert await _claimed(store, T0 + 5) == []


async def test_a_plain_claim_reads_no_limit(store: Store) -> None:
    await insert(store, [new_job(n) for n in range(6)])
    await store.queue_limit_set(_limit(2, 1), T0)
    assert len((await claim(store, T0 + 1, 6)).claimed) == 6


async def test_other_queues_do_not_count(store: Store) -> None:
    await insert(store, [new_job(n, queue="other") for n in range(4)])
    await insert(store, [new_job(n) for n in range(4)])
    await store.queue_limit_set(_limit(2), T0)
    assert len((await claim(store, T0 + 1, 4, queue="other")).claimed) == 4
    assert len(await _claimed(store, T0 + 2)) == 2


async def test_an_expired_lease_frees_its_slot_when_it_expires(store: Store) -> None:
    await insert(store, [new_job(n) for n in range(6)])
    await store.queue_limit_set(_limit(2), T0)
    held = await _claimed(store, T0, source="ready")
    assert len(held) == 2
    # Still running the millisecond before the leases end; free from the moment they do.
    assert await _claimed(store, T0 + LEASE_MS - 1, source="ready") == []
    again = await _claimed(store, T0 + LEASE_MS, source="ready")
    assert len(again) == 2
    assert {job.job_id for job in again}.isdisjoint(job.job_id for job in held)


async def test_an_expired_job_taken_over_counts_like_any_other(store: Store) -> None:
    await insert(store, [new_job(n) for n in range(4)])
    await store.queue_limit_set(_limit(1), T0)
    (crashed,) = await _claimed(store, T0)
    (taken_over,) = await _claimed(store, T0 + LEASE_MS, source="expired")
    assert taken_over.job_id == crashed.job_id
    assert taken_over.attempt == 2
    assert await _claimed(store, T0 + LEASE_MS + 1) == []


async def test_removing_a_limit_frees_waiting_jobs_at_the_next_claim(store: Store) -> None:
    await insert(store, [new_job(n) for n in range(5)])
    await store.queue_limit_set(_limit(1), T0)
    assert len(await _claimed(store, T0 + 1)) == 1
    assert await _claimed(store, T0 + 2) == []
    assert await store.queue_limit_clear(QUEUE, T0 + 3)
    # A worker that still believes the queue limited is not held back by what is gone.
    assert len(await _claimed(store, T0 + 4)) == 4


async def test_a_lowered_limit_takes_nothing_until_the_count_is_below_it(store: Store) -> None:
    await insert(store, [new_job(n) for n in range(6)])
    await store.queue_limit_set(_limit(3), T0)
    running = await _claimed(store, T0 + 1)
    await store.queue_limit_set(_limit(2), T0 + 2)
    await store.job_complete_many([running[0].lease], T0 + 3)
    assert await _claimed(store, T0 + 4) == []  # two still run: at the new limit
    await store.job_complete_many([running[1].lease], T0 + 5)
    assert len(await _claimed(store, T0 + 6)) == 1
    # Jobs over the lowered limit were never touched.
    assert (await status(store, _new(running[2]))).state == JobState.RUNNING


def _new(job: ClaimedJob) -> NewJob:
    """Enough of a NewJob for :func:`status`: id, queue and tenant."""
    return new_job(job_id=job.job_id, tenant=job.tenant_id)


async def test_concurrent_limited_claims_never_exceed_the_limit(
    store: Store, second_store: Store
) -> None:
    await insert(store, [new_job(n) for n in range(60)])
    await store.queue_limit_set(_limit(7), T0)
    rounds = [_claimed(target, T0 + 1, 3) for target in (store, second_store) for _ in range(10)]
    claimed = [job for batch in await asyncio.gather(*rounds) for job in batch]
    assert len(claimed) == 7
    assert len({job.job_id for job in claimed}) == 7


# ----- per partition key -----------------------------------------------------------------------


async def test_per_key_counts_each_tenant_separately(store: Store) -> None:
    jobs = [new_job(n, tenant=f"t{n % 3}", created_at=T0 + n) for n in range(12)]
    await insert(store, jobs)
    tenant_of = {job.id: job.tenant_id for job in jobs}
    await store.queue_limit_set(_limit(per_key=2), T0)

    claimed = await _claimed(store, T0 + 20)
    assert _keys(claimed, tenant_of) == {"t0": 2, "t1": 2, "t2": 2}
    # The first two of each key, in the claim's order.
    assert [job.job_id for job in claimed] == [job.id for job in jobs[:6]]
    assert await _claimed(store, T0 + 21) == []
    await store.job_complete_many([claimed[0].lease], T0 + 22)  # one of t0's
    (next_one,) = await _claimed(store, T0 + 23)
    assert next_one.job_id == jobs[6].id  # t0's third


async def test_a_partition_key_groups_jobs_across_tenants(store: Store) -> None:
    jobs = [
        new_job(n, tenant=f"tenant-{n}", partition_key="shared" if n < 4 else None)
        for n in range(6)
    ]
    await insert(store, jobs)
    await store.queue_limit_set(_limit(per_key=1), T0)
    claimed = {job.job_id for job in await _claimed(store, T0 + 1)}
    # One of the four sharing a key, and each of the two counted under their own tenants.
    assert len(claimed & {job.id for job in jobs[:4]}) == 1
    assert {jobs[4].id, jobs[5].id} <= claimed
    assert len(claimed) == 3


async def test_per_key_and_overall_limits_hold_together(store: Store) -> None:
    jobs = [new_job(n, tenant=f"t{n % 4}", created_at=T0 + n) for n in range(16)]
    await insert(store, jobs)
    tenant_of = {job.id: job.tenant_id for job in jobs}
    await store.queue_limit_set(_limit(5, 2), T0)
    claimed = await _claimed(store, T0 + 20)
    assert len(claimed) == 5
    assert max(_keys(claimed, tenant_of).values()) <= 2
    assert await _claimed(store, T0 + 21) == []


async def test_a_key_at_its_limit_does_not_hold_back_the_keys_behind_it(store: Store) -> None:
    busy = [new_job(n, tenant="busy", created_at=T0 + n) for n in range(20)]
    quiet = new_job(99, tenant="quiet", created_at=T0 + 50)
    await insert(store, [*busy, quiet])
    await store.queue_limit_set(_limit(per_key=1), T0)
    assert [job.job_id for job in await _claimed(store, T0 + 100, 1)] == [busy[0].id]
    assert [job.job_id for job in await _claimed(store, T0 + 101, 1)] == [quiet.id]


async def test_per_key_slots_come_back_when_leases_expire(store: Store) -> None:
    jobs = [new_job(n, created_at=T0 + n) for n in range(4)]
    await insert(store, jobs)
    await store.queue_limit_set(_limit(per_key=2), T0)
    assert len(await _claimed(store, T0 + 10, source="ready")) == 2
    assert await _claimed(store, T0 + 10 + LEASE_MS - 1, source="ready") == []
    assert len(await _claimed(store, T0 + 10 + LEASE_MS, source="ready")) == 2


async def test_concurrent_per_key_claims_never_exceed_the_limits(
    store: Store, second_store: Store
) -> None:
    jobs = [new_job(n, tenant=TENANT if n % 2 else "other") for n in range(40)]
    await insert(store, jobs)
    tenant_of = {job.id: job.tenant_id for job in jobs}
    await store.queue_limit_set(_limit(3, 2), T0)
    rounds = [_claimed(target, T0 + 1, 2) for target in (store, second_store) for _ in range(8)]
    claimed = [job for batch in await asyncio.gather(*rounds) for job in batch]
    assert len(claimed) == 3
    assert max(_keys(claimed, tenant_of).values()) == 2
