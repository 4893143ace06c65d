"""``job_cancel``, ``job_delete`` and their bulk forms: a cancelled job is finished for good (never
claimed, its old lease fenced), a delete removes finished jobs only, and both stay inside the
exact queue and tenant (or the selection) they were given."""

from __future__ import annotations

import asyncio
from uuid import uuid4

import pytest

from caravel.clock import from_ms
from caravel.jobs import CancelOutcome, JobState
from caravel.store.postgresql.cancels import CANCEL_CHANNEL
from caravel.store.protocol import JobFilter, JobRef, Store
from caravel.store.removal import CANCELLABLE, DELETABLE, JobSelection
from tests.store.conformance.builders import (
    QUEUE,
    T0,
    TENANT,
    claim,
    claim_one,
    fail,
    insert,
    new_job,
    ref,
    status,
)
from tests.support.databases import pg_listeners, until_listening


@pytest.mark.parametrize("how", ["ready", "delayed", "retrying"])
async def test_cancel_ends_a_waiting_job_at_once(store: Store, how: str) -> None:
    job = new_job(due_at=T0 + (5_000 if how == "delayed" else 0))
    await insert(store, [job])
    if how == "retrying":
        lease = (await claim_one(store, T0)).lease
        assert await fail(store, lease, T0 + 1, T0 + 60_000) == {job.id}

    assert await store.job_cancel(ref(job), T0 + 100) is CancelOutcome.CANCELLED

    got = await status(store, job)
    assert got.state is JobState.CANCELLED
    assert got.finished_at == got.updated_at == from_ms(T0 + 100)
    assert got.lease_expires_at is None
    # Never claimed again, however late.
    assert (await claim(store, T0 + 10**9)).claimed == []
    counts = (await store.queue_counts(QUEUE, T0 + 100))[0]
    assert (counts.cancelled, counts.ready, counts.delayed, counts.completed) == (1, 0, 0, 0)
    shown = await store.job_list(JobFilter(shown="cancelled", now=T0 + 100))
    assert [j.job_id for j in shown] == [job.id]
    assert await store.job_cancelled_among([job.id, uuid4()]) == {job.id}


async def test_cancel_fences_the_worker_running_the_job(store: Store) -> None:
    job = new_job()
    await insert(store, [job])
    lease = (await claim_one(store, T0)).lease

    assert await store.job_cancel(ref(job), T0 + 50) is CancelOutcome.CANCELLED_RUNNING

    got = await status(store, job)
    assert (got.state, got.finished_at, got.lease_expires_at) == (
        JobState.CANCELLED,
        from_ms(T0 + 50),
        None,
    )
    # Every write the old lease still tries changes nothing, as after a takeover.
    assert await store.job_renew_lease(lease, T0 + 60, T0 + 90_000) is None
    assert await store.job_complete_many([lease], T0 + 70) == set()
    assert await fail(store, lease, T0 + 80, T0 + 100) == set()
    assert await fail(store, lease, T0 + 80, None) == set()
    assert await status(store, job) == got
    # Its lease's end passing makes nothing claimable.
    assert (await claim(store, T0 + 10**9)).claimed == []
    assert await store.job_cancelled_among([job.id]) == {job.id}


@pytest.mark.parametrize("state", ["completed", "dead_letter", "cancelled"])
async def test_cancel_leaves_a_finished_job_as_it_was(store: Store, state: str) -> None:
    job = new_job()
    await insert(store, [job])
    if state == "cancelled":
        assert await store.job_cancel(ref(job), T0 + 1) is CancelOutcome.CANCELLED
    else:
        lease = (await claim_one(store, T0)).lease
        if state == "completed":
            assert await store.job_complete_many([lease], T0 + 1) == {job.id}
        else:
            assert await fail(store, lease, T0 + 1, None) == {job.id}
    before = await status(store, job)

    assert await store.job_cancel(ref(job), T0 + 100) is CancelOutcome.ALREADY_FINISHED

    assert await status(store, job) == before


async def test_cancel_and_delete_need_the_exact_queue_and_tenant(store: Store) -> None:
    waiting, done = new_job(1), new_job(2)
    await insert(store, [waiting, done])
    lease = (await claim_one(store, T0)).lease
    assert await store.job_complete_many([lease], T0 + 1) == {lease.job_id}
    finished = waiting if lease.job_id == waiting.id else done
    other = done if finished is waiting else waiting
    before = [await status(store, job) for job in (finished, other)]

    for job in (finished, other):
        for wrong in [
            JobRef(job.id, "other", TENANT),
            JobRef(job.id, QUEUE, "tenant-b"),
            JobRef(job.id, QUEUE, "Tenant-A"),
            JobRef(uuid4(), QUEUE, TENANT),
        ]:
            assert await store.job_cancel(wrong, T0 + 100) is CancelOutcome.NOT_FOUND, wrong
            assert await store.job_delete(wrong) is False, wrong

    assert [await status(store, job) for job in (finished, other)] == before


@pytest.mark.parametrize("state", ["completed", "dead_letter", "cancelled"])
async def test_delete_removes_a_finished_job(store: Store, state: str) -> None:
    job, kept = new_job(1), new_job(2, due_at=T0 + 10)
    await insert(store, [job, kept])
    if state == "cancelled":
        await store.job_cancel(ref(job), T0 + 1)
    else:
        lease = (await claim_one(store, T0)).lease
        if state == "completed":
            await store.job_complete_many([lease], T0 + 1)
        else:
            await fail(store, lease, T0 + 1, None)

    assert await store.job_delete(ref(job)) is True

    assert await store.job_get(ref(job)) is None
    assert await store.job_get_payload(ref(job)) is None
    assert await store.job_delete(ref(job)) is False  # gone already
    assert [j.job_id for j in await store.job_list(JobFilter())] == [kept.id]
    counts = (await store.queue_counts(QUEUE, T0 + 5))[0]
    assert (counts.completed, counts.dead_letter, counts.cancelled, counts.delayed) == (0, 0, 0, 1)


@pytest.mark.parametrize("state", ["ready", "delayed", "running"])
async def test_delete_refuses_a_job_that_has_not_finished(store: Store, state: str) -> None:
    job = new_job(due_at=T0 + (5_000 if state == "delayed" else 0))
    await insert(store, [job])
    if state == "running":
        await claim_one(store, T0)
    before = await status(store, job)

    assert await store.job_delete(ref(job)) is False

    assert await status(store, job) == before


async def _mixed(store: Store) -> dict[str, list[JobRef]]:
    """Jobs of two types, two tenants and two queues, some running, created a second apart."""
    jobs = [
        new_job(n, job_type=f"type.{n % 2}", tenant=f"tenant-{n % 3}", created_at=T0 + n * 1_000)
        for n in range(9)
    ]
    elsewhere = new_job(99, queue="other", created_at=T0)
    await insert(store, [*jobs, elsewhere])
    running = (await claim(store, T0 + 2_500, 2)).claimed  # the two oldest
    return {
        "all": [ref(job) for job in jobs],
        "running": [JobRef(c.job_id, c.queue, c.tenant_id) for c in running],
        "elsewhere": [ref(elsewhere)],
    }


async def test_cancel_many_takes_bounded_batches_of_what_the_selection_matches(
    store: Store,
) -> None:
    made = await _mixed(store)
    everything = JobSelection(QUEUE, CANCELLABLE)
    assert await store.job_count_selected(everything, deleting=False) == {
        JobState.READY: 7,
        JobState.RUNNING: 2,
    }

    first = await store.job_cancel_many(everything, T0 + 20_000, 4)
    second = await store.job_cancel_many(everything, T0 + 20_000, 4)
    third = await store.job_cancel_many(everything, T0 + 20_000, 4)

    assert (first, second, third) == (4, 4, 1)
    assert await store.job_cancel_many(everything, T0 + 20_000, 4) == 0
    states = {(await store.job_get(r)).state for r in made["all"]}  # type: ignore[union-attr]
    assert states == {JobState.CANCELLED}
    cancelled = await store.job_cancelled_among([r.job_id for r in made["all"]])
    assert cancelled == {r.job_id for r in made["all"]}
    # The other queue's job is untouched.
    other = await store.job_get(made["elsewhere"][0])
    assert other is not None
    assert other.state is JobState.READY
    assert await store.job_count_selected(everything, deleting=False) == {}


async def test_cancel_many_matches_type_tenant_state_and_age(store: Store) -> None:
    made = await _mixed(store)
    by_type = JobSelection(QUEUE, (JobState.READY,), job_type="type.0", tenant_id="tenant-0")
    # Jobs 0..8: type.0 are the even ones, tenant-0 those divisible by 3: 0 and 6, 0 running.
    assert await store.job_count_selected(by_type, deleting=False) == {JobState.READY: 1}
    assert await store.job_cancel_many(by_type, T0 + 20_000, 100) == 1
    six = made["all"][6]
    assert (await status_of(store, six)) is JobState.CANCELLED

    # Created before T0 + 4 s: jobs 0..3, of which 0 and 1 run and 2, 3 wait.
    old = JobSelection(QUEUE, CANCELLABLE, before=T0 + 4_000)
    assert await store.job_count_selected(old, deleting=False) == {
        JobState.READY: 2,
        JobState.RUNNING: 2,
    }
    running = JobSelection(QUEUE, (JobState.RUNNING,))
    assert await store.job_cancel_many(running, T0 + 20_000, 100) == 2
    for r in made["running"]:
        assert await status_of(store, r) is JobState.CANCELLED
    # Named states a cancel cannot end are ignored, not acted on.
    finished = JobSelection(QUEUE, DELETABLE)
    assert await store.job_count_selected(finished, deleting=False) == {}
    assert await store.job_cancel_many(finished, T0 + 20_000, 100) == 0


async def test_delete_many_removes_only_finished_jobs_the_selection_matches(
    store: Store,
) -> None:
    made = await _mixed(store)
    # Jobs 2..5 cancelled at two moments; 0 and 1 run, 6..8 wait.
    for n, at in ((2, T0 + 10_000), (3, T0 + 10_000), (4, T0 + 30_000), (5, T0 + 30_000)):
        assert await store.job_cancel(made["all"][n], at) is CancelOutcome.CANCELLED
    finished = JobSelection(QUEUE, DELETABLE)
    assert await store.job_count_selected(finished, deleting=True) == {JobState.CANCELLED: 4}

    # Finished before T0 + 20 s: jobs 2 and 3 only.
    old = JobSelection(QUEUE, DELETABLE, before=T0 + 20_000)
    assert await store.job_delete_many(old, 1) == 1
    assert await store.job_delete_many(old, 1) == 1
    assert await store.job_delete_many(old, 1) == 0
    gone = [await store.job_get(made["all"][n]) for n in (2, 3)]
    assert gone == [None, None]

    # Waiting and running jobs are never deleted, whatever states are named.
    everything = JobSelection(QUEUE, (*CANCELLABLE, *DELETABLE))
    assert await store.job_count_selected(everything, deleting=True) == {JobState.CANCELLED: 2}
    assert await store.job_delete_many(everything, 100) == 2
    left = {j.job_id: j.state for j in await store.job_list(JobFilter(queue=QUEUE))}
    assert len(left) == 5
    assert set(left.values()) == {JobState.READY, JobState.RUNNING}
    assert await store.job_get(made["elsewhere"][0]) is not None


async def test_a_cancel_of_a_running_job_is_pushed_where_the_store_can(
    store: Store, db_url: str
) -> None:
    notices = store.cancel_notices()
    if notices is None:
        pytest.skip("this store has no push: workers look with job_cancelled_among")
    waiting, running = new_job(1), new_job(2, due_at=T0 + 5)
    await insert(store, [waiting, running])
    await claim_one(store, T0)  # the first due: waiting's id is older
    await claim_one(store, T0 + 5)
    # The store that pushes cancels is PostgreSQL's: the server shows its LISTEN in place.
    listening = await pg_listeners(db_url, CANCEL_CHANNEL)
    heard = asyncio.ensure_future(anext(notices))
    try:
        await until_listening(db_url, CANCEL_CHANNEL, beyond=listening)
        fresh = new_job(3, created_at=T0 + 10)
        await insert(store, [fresh])
        assert await store.job_cancel(ref(fresh), T0 + 20) is CancelOutcome.CANCELLED
        assert await store.job_cancel(ref(running), T0 + 20) is CancelOutcome.CANCELLED_RUNNING
        assert await asyncio.wait_for(heard, 5) == running.id  # the waiting one is not announced
    finally:
        heard.cancel()
        await notices.aclose()  # type: ignore[attr-defined]


async def status_of(store: Store, job: JobRef) -> JobState:
    found = await store.job_get(job)
    assert found is not None
    return found.state
