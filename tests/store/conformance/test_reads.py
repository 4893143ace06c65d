"""The operator reads: ``job_get`` and ``job_get_payload`` (exact id, queue and tenant),
``job_list`` (filters, order, pages), ``queue_counts`` at a given moment and ``job_throughput``
per time bucket."""

from __future__ import annotations

from uuid import uuid4

import pytest

from caravel.clock import from_ms
from caravel.jobs import JobState
from caravel.store.protocol import (
    SHOWN_STATES,
    JobFilter,
    JobRef,
    QueueCounts,
    Store,
    ThroughputBucket,
    ThroughputQuery,
)
from tests.store.conformance.builders import (
    QUEUE,
    T0,
    TENANT,
    claim,
    claim_one,
    fail,
    ids,
    insert,
    new_job,
    ref,
)

# ----- one job --------------------------------------------------------------------------------


async def test_find_names_a_job_by_id_alone_for_operators(store: Store) -> None:
    job = new_job(1)
    elsewhere = new_job(2, queue="other", tenant="tenant-b")
    await insert(store, [job, elsewhere])

    for each in (job, elsewhere):
        found = await store.job_find(each.id)
        assert found is not None
        assert (found.job_id, found.queue, found.tenant_id) == (each.id, each.queue, each.tenant_id)
    assert await store.job_find(uuid4()) is None


async def test_get_needs_the_exact_id_queue_and_tenant(store: Store) -> None:
    job = new_job(1, body='{"n":1,"secret":"s"}')
    neighbour = new_job(2, queue="other", tenant="tenant-b")
    await insert(store, [job, neighbour])

    found = await store.job_get(ref(job))
    assert found is not None
    assert (found.job_id, found.queue, found.tenant_id) == (job.id, QUEUE, TENANT)
    assert await store.job_get_payload(ref(job)) == job.payload
    wrong = [
        JobRef(job.id, "other", TENANT),
        JobRef(job.id, QUEUE, "tenant-b"),
        JobRef(job.id, QUEUE, "Tenant-A"),
        JobRef(job.id, "Default", TENANT),
        JobRef(job.id, QUEUE, TENANT + " "),
        JobRef(neighbour.id, QUEUE, TENANT),
        JobRef(uuid4(), QUEUE, TENANT),
    ]
    for each in wrong:
        assert await store.job_get(each) is None, each
        assert await store.job_get_payload(each) is None, each


# ----- listing --------------------------------------------------------------------------------


async def test_list_filters_by_every_field_given(store: Store) -> None:
    jobs = [
        new_job(
            n,
            queue=("a", "b")[n % 2],
            tenant=("t1", "t2", "T1")[n % 3],
            job_type=("tests.x.v1", "tests.y.v1")[n // 6 % 2],
            created_at=T0 + n,
        )
        for n in range(12)
    ]
    await insert(store, jobs)
    running = {c.job_id for c in (await claim(store, T0 + 100, 2, queue="a")).claimed}
    newest_first = list(reversed(jobs))

    def expect(**where: str) -> list[object]:
        fields = {"queue": "queue", "tenant_id": "tenant_id", "job_type": "job_type"}
        return [
            job.id
            for job in newest_first
            if all(getattr(job, fields[name]) == value for name, value in where.items())
        ]

    for where in [
        {},
        {"queue": "a"},
        {"tenant_id": "t1"},
        {"tenant_id": "T1"},
        {"job_type": "tests.y.v1"},
        {"queue": "b", "tenant_id": "t2", "job_type": "tests.x.v1"},
    ]:
        assert ids(await store.job_list(JobFilter(**where))) == expect(**where), where
    listed = await store.job_list(JobFilter(state=JobState.RUNNING))
    assert {s.job_id for s in listed} == running
    assert {s.state for s in listed} == {JobState.RUNNING}
    ready = await store.job_list(JobFilter(queue="a", state=JobState.READY))
    assert ids(ready) == [i for i in expect(queue="a") if i not in running]
    assert await store.job_list(JobFilter(queue="c")) == []


async def test_list_orders_by_creation_and_pages(store: Store) -> None:
    jobs = [new_job(n, created_at=T0 + 1_000 - 10 * n) for n in range(7)]  # inserted newest first
    await insert(store, jobs)
    oldest = list(reversed(ids(jobs)))

    assert ids(await store.job_list(JobFilter())) == ids(jobs)
    assert ids(await store.job_list(JobFilter(oldest_first=True))) == oldest
    assert ids(await store.job_list(JobFilter(limit=3, offset=2))) == ids(jobs)[2:5]
    assert ids(await store.job_list(JobFilter(limit=3, offset=1, oldest_first=True))) == oldest[1:4]
    assert ids(await store.job_list(JobFilter(limit=3, offset=6))) == ids(jobs)[6:]
    assert await store.job_list(JobFilter(limit=3, offset=7)) == []


@pytest.mark.parametrize("oldest_first", [False, True])
async def test_pages_never_repeat_or_skip_jobs_created_in_the_same_millisecond(
    store: Store, oldest_first: bool
) -> None:
    jobs = [new_job(n) for n in range(9)]  # all created at T0
    await insert(store, jobs)
    pages = [
        ids(await store.job_list(JobFilter(limit=4, offset=offset, oldest_first=oldest_first)))
        for offset in (0, 4, 8)
    ]
    assert [len(page) for page in pages] == [4, 4, 1]
    assert sorted(i for page in pages for i in page) == sorted(ids(jobs))


@pytest.mark.parametrize("oldest_first", [False, True])
async def test_a_listing_of_every_queue_pages_as_one_ordered_list(
    store: Store, oldest_first: bool
) -> None:
    # Three queues interleaved in creation time: the page merged from each queue's own is the
    # one an order of every job by creation gives.
    jobs = [new_job(n, queue="abc"[n % 3], created_at=T0 + 10 * n) for n in range(14)]
    await insert(store, jobs)
    every = ids(jobs) if oldest_first else list(reversed(ids(jobs)))
    pages = [
        ids(await store.job_list(JobFilter(limit=4, offset=o, oldest_first=oldest_first)))
        for o in (0, 4, 8, 12)
    ]
    assert pages == [every[0:4], every[4:8], every[8:12], every[12:]]
    assert await store.job_list(JobFilter(limit=4, offset=14, oldest_first=oldest_first)) == []
    tenant = await store.job_list(JobFilter(tenant_id=TENANT, limit=5, offset=3))
    assert ids(tenant) == list(reversed(ids(jobs)))[3:8]


@pytest.mark.parametrize("oldest_first", [False, True])
async def test_pages_of_every_queue_never_repeat_or_skip_jobs_created_together(
    store: Store, oldest_first: bool
) -> None:
    jobs = [new_job(n, queue="abc"[n % 3]) for n in range(11)]  # all created at T0
    await insert(store, jobs)
    whole = ids(await store.job_list(JobFilter(limit=20, oldest_first=oldest_first)))
    pages = [
        ids(await store.job_list(JobFilter(limit=4, offset=o, oldest_first=oldest_first)))
        for o in (0, 4, 8)
    ]
    assert [i for page in pages for i in page] == whole
    assert sorted(whole) == sorted(ids(jobs))


# ----- counts ---------------------------------------------------------------------------------


async def _one_of_each_state(store: Store) -> None:
    """In ``default``: running until T0+1500, running until T0+1000, a dead letter, a completed
    job, two ready (due T0 and T0+100) and one due at T0+2000. In ``other``: one due at T0+50."""
    for n, lease_ms in [(1, 1_500), (2, 1_000)]:
        await insert(store, [new_job(n, created_at=T0 - 100)])
        await claim_one(store, T0, lease_ms=lease_ms)
    await insert(store, [new_job(3, created_at=T0 - 100)])
    dead = await claim_one(store, T0)
    assert await fail(store, dead.lease, T0 + 1, None) == {dead.job_id}
    await insert(store, [new_job(4, created_at=T0 - 100)])
    done = await claim_one(store, T0)
    assert await store.job_complete_many([done.lease], T0 + 1) == {done.job_id}
    await insert(
        store,
        [
            new_job(5, due_at=T0 + 100),
            new_job(6, due_at=T0),
            new_job(7, due_at=T0 + 2_000),
            new_job(8, queue="other", due_at=T0 + 50),
        ],
    )


async def test_counts_tell_each_state_apart_at_the_moment_given(store: Store) -> None:
    await _one_of_each_state(store)

    # A lease ending at the very moment counts as expired, a job due then as ready.
    at_1000 = await store.queue_counts(QUEUE, T0 + 1_000)
    at_2000 = await store.queue_counts(QUEUE, T0 + 2_000)

    assert at_1000 == [
        QueueCounts(
            QUEUE,
            ready=2,
            delayed=1,
            running=1,
            expired=1,
            dead_letter=1,
            completed=1,
            oldest_ready_due_ms=T0,
        )
    ]
    assert at_2000 == [
        QueueCounts(
            QUEUE,
            ready=3,
            delayed=0,
            running=0,
            expired=2,
            dead_letter=1,
            completed=1,
            oldest_ready_due_ms=T0,
        )
    ]


async def test_list_by_shown_state_splits_as_the_counts_do(store: Store) -> None:
    await _one_of_each_state(store)
    for now in (T0 + 10, T0 + 1_000, T0 + 2_000):
        counts = (await store.queue_counts(QUEUE, now))[0]
        seen: set[object] = set()
        for shown in SHOWN_STATES:
            listed = await store.job_list(JobFilter(queue=QUEUE, shown=shown, now=now))
            assert len(listed) == getattr(counts, shown), (now, shown)
            seen |= {job.job_id for job in listed}
        assert len(seen) == len(await store.job_list(JobFilter(queue=QUEUE)))  # each in one
    # The edges: a lease ending at the very moment is expired; a job due then is ready.
    expired = await store.job_list(JobFilter(shown="expired", now=T0 + 1_000))
    assert [(j.state, j.lease_expires_at) for j in expired] == [
        (JobState.RUNNING, from_ms(T0 + 1_000))
    ]
    delayed = await store.job_list(JobFilter(shown="delayed", now=T0 + 100))
    assert [j.due_at for j in delayed] == [from_ms(T0 + 2_000)]
    assert {j.queue for j in await store.job_list(JobFilter(shown="ready", now=T0 + 50))} == {
        QUEUE,
        "other",
    }


async def test_counts_cover_every_queue_in_name_order(store: Store) -> None:
    await _one_of_each_state(store)
    everything = await store.queue_counts(None, T0 + 10)
    assert [c.queue for c in everything] == [QUEUE, "other"]
    assert everything[0] == (await store.queue_counts(QUEUE, T0 + 10))[0]
    # Nothing in "other" is due yet: no oldest due time.
    assert everything[1] == QueueCounts("other", 0, 1, 0, 0, 0, 0, oldest_ready_due_ms=None)
    assert (await store.queue_counts("other", T0 + 60))[0] == QueueCounts(
        "other", 1, 0, 0, 0, 0, 0, oldest_ready_due_ms=T0 + 50
    )
    assert await store.queue_counts("empty", T0) == []


# ----- throughput -----------------------------------------------------------------------------

MINUTE = 60_000


async def _finish(store: Store, queue: str, at: int, *, ok: bool) -> None:
    """A job of ``queue`` completed (or dead-lettered) at ``at``."""
    job = new_job(at, queue=queue, created_at=at - 1)
    await insert(store, [job])
    lease = (await claim_one(store, at - 1, queue=queue)).lease
    if ok:
        assert await store.job_complete_many([lease], at) == {job.id}
    else:
        assert await fail(store, lease, at, None) == {job.id}


async def test_throughput_counts_finished_jobs_per_queue_and_bucket(store: Store) -> None:
    await _finish(store, "a", T0 - 1, ok=True)  # before the range
    await _finish(store, "a", T0, ok=True)
    await _finish(store, "a", T0 + MINUTE - 1, ok=True)
    await _finish(store, "a", T0 + MINUTE, ok=False)
    await _finish(store, "b", T0 + MINUTE + 500, ok=True)
    await _finish(store, "a", T0 + 3 * MINUTE - 1, ok=False)
    await _finish(store, "a", T0 + 3 * MINUTE, ok=True)  # the range's end is excluded
    # A lease that ran out on the last attempt counts as a dead letter when the claim finds it.
    await insert(store, [new_job(99, queue="b", max_attempts=1)])
    await claim_one(store, T0, queue="b", lease_ms=1_000)
    assert (await claim(store, T0 + 2 * MINUTE + 7, queue="b")).dead_lettered == 1
    # Unfinished jobs never count.
    await insert(store, [new_job(100, queue="a"), new_job(101, queue="a")])
    await claim_one(store, T0 + 10, queue="a")

    found = await store.job_throughput(ThroughputQuery(None, T0, T0 + 3 * MINUTE, MINUTE))

    assert found == [
        ThroughputBucket("a", T0, completed=2, dead_lettered=0),
        ThroughputBucket("a", T0 + MINUTE, completed=0, dead_lettered=1),
        ThroughputBucket("a", T0 + 2 * MINUTE, completed=0, dead_lettered=1),
        ThroughputBucket("b", T0 + MINUTE, completed=1, dead_lettered=0),
        ThroughputBucket("b", T0 + 2 * MINUTE, completed=0, dead_lettered=1),
    ]
    only_b = await store.job_throughput(ThroughputQuery("b", T0, T0 + 3 * MINUTE, MINUTE))
    assert only_b == [bucket for bucket in found if bucket.queue == "b"]
    # Buckets start at ``since``, whatever it is.
    shifted = await store.job_throughput(ThroughputQuery("a", T0 - 1, T0 + MINUTE, 2 * MINUTE))
    assert shifted == [ThroughputBucket("a", T0 - 1, completed=3, dead_lettered=0)]
    assert await store.job_throughput(ThroughputQuery("c", T0, T0 + MINUTE, MINUTE)) == []
