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
from caravel.store.protocol import KeyUsage, NewJob, QueueLimit, QueueLimitUsage, ReadStore, Store
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


async def test_a_plain_claim_takes_nothing_from_a_limited_queue(store: Store) -> None:
    """A worker that has not read a new limit yet sends plain claims: they must not take the
    queue past the limit, so they take nothing until the worker claims the limited way."""
    await insert(store, [new_job(n) for n in range(6)])
    await store.queue_limit_set(_limit(2, 1), T0)
    assert (await claim(store, T0 + 1, 6)).claimed == []
    assert (await claim(store, T0 + 1, 6, source="ready")).claimed == []
    assert len(await _claimed(store, T0 + 2)) == 1  # per_key 1: the jobs share one tenant
    assert await store.queue_limit_clear(QUEUE, T0 + 3) is True
    assert len((await claim(store, T0 + 4, 6)).claimed) == 5


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


# ----- how a limited queue stands against its limits ---------------------------------------------


async def test_only_limited_queues_have_a_usage(store: Store, reader: ReadStore) -> None:
    await insert(store, [new_job(n) for n in range(3)])
    assert await reader.queue_limit_usage(None, T0 + 1) == []
    assert await reader.queue_limit_usage(QUEUE, T0 + 1) == []
    await store.queue_limit_set(ConcurrencyLimit(queue="other", concurrency=1), T0)
    await store.queue_limit_set(_limit(5), T0)
    used = await reader.queue_limit_usage(None, T0 + 1)
    assert [usage.limit.queue for usage in used] == [QUEUE, "other"]
    assert used[0] == QueueLimitUsage(QueueLimit(QUEUE, 5, None, T0), 0, 0)
    assert await reader.queue_limit_usage("other", T0 + 1) == [used[1]]


async def test_an_overall_cap_counts_running_and_the_ready_jobs_beyond_it(store: Store) -> None:
    await insert(store, [new_job(n) for n in range(10)])
    await insert(store, [new_job(n, queue="other") for n in range(4)])
    await insert(store, [new_job(n + 20, due_at=T0 + 1000) for n in range(3)])  # not yet due
    await store.queue_limit_set(_limit(4), T0)
    # Nothing runs: four of the ten ready jobs could start, six wait.
    (usage,) = await store.queue_limit_usage(QUEUE, T0 + 1)
    assert (usage.running, usage.waiting, usage.keys) == (0, 6, ())
    claimed = await _claimed(store, T0 + 2, 3)
    (usage,) = await store.queue_limit_usage(QUEUE, T0 + 3)
    assert (usage.running, usage.waiting) == (3, 6)  # one slot left for seven ready
    await _claimed(store, T0 + 4)
    (usage,) = await store.queue_limit_usage(QUEUE, T0 + 5)
    assert (usage.running, usage.waiting) == (4, 6)  # at the cap: every ready job waits
    # A finished job and an expired lease no longer run.
    await store.job_complete_many([claimed[0].lease], T0 + 6)
    (usage,) = await store.queue_limit_usage(QUEUE, T0 + 7)
    assert (usage.running, usage.waiting) == (3, 5)
    (usage,) = await store.queue_limit_usage(QUEUE, T0 + 2 + LEASE_MS)
    assert (usage.running, usage.waiting) == (1, 6)  # nine ready: the delayed three are due


async def test_a_raised_cap_leaves_nothing_waiting(store: Store) -> None:
    await insert(store, [new_job(n) for n in range(3)])
    await store.queue_limit_set(_limit(2), T0)
    await _claimed(store, T0 + 1)
    await store.queue_limit_set(_limit(10), T0 + 2)
    (usage,) = await store.queue_limit_usage(QUEUE, T0 + 3)
    assert (usage.running, usage.waiting) == (2, 0)


async def test_per_key_usage_names_the_busiest_keys(store: Store) -> None:
    # t0: 5 jobs, t1: 3, t2: 1, and "shared" groups two tenants' jobs under one key.
    jobs = [
        *(new_job(n, tenant="t0", created_at=T0 + n) for n in range(5)),
        *(new_job(10 + n, tenant="t1", created_at=T0 + 10 + n) for n in range(3)),
        new_job(20, tenant="t2", created_at=T0 + 20),
        new_job(30, tenant="ta", partition_key="shared", created_at=T0 + 30),
        new_job(31, tenant="tb", partition_key="shared", created_at=T0 + 31),
    ]
    await insert(store, jobs)
    await store.queue_limit_set(_limit(per_key=2), T0)
    (usage,) = await store.queue_limit_usage(QUEUE, T0 + 40)
    # Nothing runs yet; each key's jobs beyond two wait.
    assert (usage.running, usage.waiting) == (0, 4)
    assert usage.keys == (KeyUsage("t0", 0, 3), KeyUsage("t1", 0, 1))
    await _claimed(store, T0 + 41)  # two of t0, t1 and shared, one of t2
    (usage,) = await store.queue_limit_usage(QUEUE, T0 + 42)
    assert (usage.running, usage.waiting) == (7, 4)
    assert usage.keys == (
        KeyUsage("t0", 2, 3),
        KeyUsage("t1", 2, 1),
        KeyUsage("shared", 2, 0),
        KeyUsage("t2", 1, 0),
    )
    # At most as many keys as asked for, the most running first; none when none are asked for.
    (top,) = await store.queue_limit_usage(QUEUE, T0 + 42, keys=2)
    assert top.keys == usage.keys[:2]
    (bare,) = await store.queue_limit_usage(QUEUE, T0 + 42, keys=0)
    assert (bare.running, bare.waiting, bare.keys) == (7, 4, ())


async def test_both_caps_count_what_neither_lets_start(store: Store) -> None:
    jobs = [new_job(n, tenant=f"t{n % 3}", created_at=T0 + n) for n in range(9)]
    await insert(store, jobs)
    await store.queue_limit_set(_limit(4, 2), T0)
    # The keys would let six start (two each), the overall cap four: five of nine wait.
    (usage,) = await store.queue_limit_usage(QUEUE, T0 + 10)
    assert (usage.running, usage.waiting) == (0, 5)
    assert usage.keys == tuple(KeyUsage(f"t{n}", 0, 1) for n in range(3))
    await _claimed(store, T0 + 11)
    (usage,) = await store.queue_limit_usage(QUEUE, T0 + 12)
    assert (usage.running, usage.waiting) == (4, 5)


@pytest.mark.parametrize(
    ("queue", "keys", "field"),
    [("Bad Queue", 20, "queue"), (QUEUE, -1, "keys"), (QUEUE, 1001, "keys"), (None, True, "keys")],
)
async def test_a_bad_usage_read_is_refused_naming_the_field(
    reader: ReadStore, queue: object, keys: object, field: str
) -> None:
    with pytest.raises(ValidationError) as raised:
        await reader.queue_limit_usage(queue, T0, keys=keys)  # type: ignore[arg-type]
    assert raised.value.field == field
