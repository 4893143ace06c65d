"""Batches: every member's move into or out of an end state (completed, dead-lettered, cancelled)
updates its batch's counts in the same transaction, whichever operation made it (an
acknowledgement, a failure, a claim that dead-letters an expired lease, a cancel, a replay).
When the counts first reach the total the batch is finished and its held callback released,
handed the counts, once: a replay after that moves the counts but releases nothing again."""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

from caravel.clock import from_ms
from caravel.jobs import CancelOutcome, JobState
from caravel.limits import HELD_DUE_AT
from caravel.store.links import BatchRecord, NewBatch
from caravel.store.protocol import JobFilter, NewJob, Store
from caravel.store.pruning import PruneRequest
from caravel.store.removal import JobSelection
from tests.store.conformance.builders import (
    QUEUE,
    T0,
    TENANT,
    claim,
    claim_one,
    fail,
    ids,
    insert_batch,
    new_job,
    ref,
    status,
)

CALLBACKS = "callbacks"
FAR = HELD_DUE_AT - 1
DAY = 86_400_000


def members(count: int, **fields: Any) -> list[NewJob]:
    return [new_job(n, **fields) for n in range(count)]


def callback(**fields: Any) -> NewJob:
    return new_job(100, queue=CALLBACKS, **fields)


async def record(store: Store, batch: NewBatch) -> BatchRecord:
    got = await store.batch_get(batch.id, batch.tenant_id)
    assert got is not None
    return got


def counts(got: BatchRecord) -> tuple[int, int, int, int]:
    """(completed, dead_letter, cancelled, pending)."""
    return (got.completed, got.dead_letter, got.cancelled, got.pending)


async def complete_all(store: Store, now: int, count: int, queue: str = QUEUE) -> set[Any]:
    claimed = (await claim(store, now, count, queue=queue)).claimed
    assert len(claimed) == count
    return await store.job_complete_many([job.lease for job in claimed], now)


async def held_callback(store: Store, job: NewJob) -> bool:
    got = await status(store, job)
    return got.held and got.due_at == from_ms(HELD_DUE_AT)


async def test_a_new_batch_is_all_pending_and_its_callback_held(store: Store) -> None:
    made, done = members(3), callback()
    batch = await insert_batch(store, made, done)

    got = await record(store, batch)
    assert (got.id, got.tenant_id, got.total, got.callback_id) == (batch.id, TENANT, 3, done.id)
    assert counts(got) == (0, 0, 0, 3)
    assert (got.created_at, got.finished_at) == (T0, None)
    assert await held_callback(store, done)
    assert (await status(store, made[0])).batch_id == batch.id
    assert (await status(store, done)).batch_id is None  # the callback is no member
    assert (await claim(store, FAR, 10, queue=CALLBACKS)).claimed == []


async def test_the_last_finish_releases_the_callback_with_the_counts(store: Store) -> None:
    made, done = members(4, max_attempts=1), callback()
    batch = await insert_batch(store, made, done)
    first = await claim_one(store, T0)
    second = await claim_one(store, T0)
    assert await store.job_complete_many([first.lease, second.lease], T0 + 10) == {
        first.job_id,
        second.job_id,
    }
    assert counts(await record(store, batch)) == (2, 0, 0, 2)
    third = await claim_one(store, T0 + 20)
    assert await fail(store, third.lease, T0 + 30, None) == {third.job_id}
    assert counts(await record(store, batch)) == (2, 1, 0, 1)
    assert await held_callback(store, done)
    [last] = [job for job in made if job.id not in {first.job_id, second.job_id, third.job_id}]

    assert await store.job_cancel(ref(last), T0 + 40) is CancelOutcome.CANCELLED

    got = await record(store, batch)
    assert counts(got) == (2, 1, 1, 0)
    assert (got.finished_at, got.updated_at) == (T0 + 40, T0 + 40)
    released = await status(store, done)
    assert (released.state, released.held, released.due_at) == (
        JobState.READY,
        False,
        from_ms(T0 + 40),
    )
    running = await claim_one(store, T0 + 40, queue=CALLBACKS)
    assert running.job_id == done.id
    handed = json.loads(running.upstream or "")["batch"]
    # The id in the database's own text form (SQLite keeps uuids as bare hex).
    assert UUID(handed.pop("batch_id")) == batch.id
    assert handed == {"total": 4, "completed": 2, "dead_letter": 1, "cancelled": 1}


async def test_a_failure_with_retries_left_counts_nothing(store: Store) -> None:
    made = members(1, max_attempts=2)
    batch = await insert_batch(store, made, callback())
    lease = (await claim_one(store, T0)).lease
    assert await fail(store, lease, T0 + 10, T0 + 1_000) == {made[0].id}

    assert counts(await record(store, batch)) == (0, 0, 0, 1)
    assert (await claim(store, FAR, 10, queue=CALLBACKS)).claimed == []


async def test_an_expired_last_lease_dead_letters_and_counts_in_the_claim(store: Store) -> None:
    made, done = members(2, max_attempts=1), callback()
    batch = await insert_batch(store, made, done)
    assert len(await complete_all(store, T0, 1)) == 1
    await claim_one(store, T0 + 10, lease_ms=1_000)

    assert (await claim(store, T0 + 1_010)).dead_lettered == 1

    got = await record(store, batch)
    assert counts(got) == (1, 1, 0, 0)
    assert got.finished_at == T0 + 1_010
    running = await claim_one(store, T0 + 1_010, queue=CALLBACKS)
    assert json.loads(running.upstream or "")["batch"]["dead_letter"] == 1


async def test_cancel_many_counts_each_member(store: Store) -> None:
    made, done = members(5), callback()
    batch = await insert_batch(store, made, done)
    assert len(await complete_all(store, T0, 1)) == 1
    await claim_one(store, T0 + 5)  # one running, three waiting

    selection = JobSelection(QUEUE, (JobState.READY, JobState.RUNNING))
    assert await store.job_cancel_many(selection, T0 + 10, 2) == 2
    assert counts(await record(store, batch)) == (1, 0, 2, 2)
    assert await store.job_cancel_many(selection, T0 + 20, 10) == 2

    got = await record(store, batch)
    assert counts(got) == (1, 0, 4, 0)
    assert got.finished_at == T0 + 20
    running = await claim_one(store, T0 + 20, queue=CALLBACKS)
    assert json.loads(running.upstream or "")["batch"]["cancelled"] == 4


async def test_a_replay_after_the_batch_finished_never_releases_the_callback_again(
    store: Store,
) -> None:
    made, done = members(2, max_attempts=1), callback()
    batch = await insert_batch(store, made, done)
    assert len(await complete_all(store, T0, 1)) == 1
    lease = (await claim_one(store, T0 + 10)).lease
    assert await fail(store, lease, T0 + 20, None) == {lease.job_id}
    assert (await record(store, batch)).finished_at == T0 + 20
    released = await status(store, done)
    assert released.due_at == from_ms(T0 + 20)

    assert await store.job_replay(ref(next(j for j in made if j.id == lease.job_id)), T0 + 30)
    assert counts(await record(store, batch)) == (1, 0, 0, 1)
    assert len(await complete_all(store, T0 + 40, 1)) == 1

    got = await record(store, batch)
    assert counts(got) == (2, 0, 0, 0)
    assert (got.finished_at, got.updated_at) == (T0 + 20, T0 + 40)
    again = await status(store, done)
    assert (again.state, again.due_at, again.updated_at) == (
        JobState.READY,
        from_ms(T0 + 20),
        released.updated_at,
    )
    running = await claim_one(store, T0 + 40, queue=CALLBACKS)
    assert json.loads(running.upstream or "")["batch"]["dead_letter"] == 1  # the first finish
    assert (await claim(store, FAR, 10, queue=CALLBACKS, source="ready")).claimed == []


async def test_a_member_replayed_before_the_batch_finished_holds_the_callback_back(
    store: Store,
) -> None:
    made, done = members(2, max_attempts=1), callback()
    batch = await insert_batch(store, made, done)
    lease = (await claim_one(store, T0)).lease
    assert await fail(store, lease, T0 + 10, None) == {lease.job_id}
    failed = next(j for j in made if j.id == lease.job_id)
    other = next(j for j in made if j.id != lease.job_id)
    assert await store.job_replay(ref(failed), T0 + 20)

    last = await claim_one(store, T0 + 30)
    assert last.job_id == other.id
    assert await store.job_complete_many([last.lease], T0 + 30) == {other.id}
    assert await held_callback(store, done)  # the replayed member is pending again
    assert (await record(store, batch)).finished_at is None

    assert len(await complete_all(store, T0 + 40, 1)) == 1
    running = await claim_one(store, T0 + 40, queue=CALLBACKS)
    handed = json.loads(running.upstream or "")["batch"]
    assert (handed["completed"], handed["dead_letter"]) == (2, 0)


async def test_a_completed_callback_stays_completed_after_a_replay(store: Store) -> None:
    made, done = members(1, max_attempts=1), callback()
    batch = await insert_batch(store, made, done)
    lease = (await claim_one(store, T0)).lease
    assert await fail(store, lease, T0 + 10, None) == {made[0].id}
    assert len(await complete_all(store, T0 + 20, 1, CALLBACKS)) == 1

    assert await store.job_replay(ref(made[0]), T0 + 30)
    assert len(await complete_all(store, T0 + 40, 1)) == 1

    assert counts(await record(store, batch)) == (1, 0, 0, 0)
    assert (await status(store, done)).state is JobState.COMPLETED
    assert (await claim(store, FAR, 10, queue=CALLBACKS)).claimed == []


async def test_a_batch_without_a_callback_finishes(store: Store) -> None:
    made = members(2)
    batch = await insert_batch(store, made)
    assert len(await complete_all(store, T0 + 5, 2)) == 2

    got = await record(store, batch)
    assert (got.callback_id, got.finished_at) == (None, T0 + 5)
    assert counts(got) == (2, 0, 0, 0)


async def test_a_cancelled_callback_is_not_released(store: Store) -> None:
    made, done = members(1), callback()
    batch = await insert_batch(store, made, done)
    assert await store.job_cancel(ref(done), T0 + 1) is CancelOutcome.CANCELLED
    assert len(await complete_all(store, T0 + 5, 1)) == 1

    assert (await record(store, batch)).finished_at == T0 + 5
    assert (await status(store, done)).state is JobState.CANCELLED
    assert (await claim(store, FAR, 10, queue=CALLBACKS)).claimed == []


async def test_batch_get_needs_the_exact_tenant(store: Store) -> None:
    batch = await insert_batch(store, members(1, tenant="tenant-b"), tenant="tenant-b")

    assert (await store.batch_get(batch.id, "tenant-b")) is not None
    assert (await store.batch_get(batch.id, None)) is not None
    assert await store.batch_get(batch.id, TENANT) is None
    assert await store.batch_get(new_job(7).id, None) is None


async def test_batch_list_is_newest_first(store: Store) -> None:
    made = [
        await insert_batch(store, members(1, created_at=T0 + at), created_at=T0 + at, tenant=t)
        for at, t in ((0, TENANT), (20, "tenant-b"), (10, TENANT))
    ]
    newest_first = [made[1].id, made[2].id, made[0].id]

    assert [b.id for b in await store.batch_list(10)] == newest_first
    assert [b.id for b in await store.batch_list(2)] == newest_first[:2]
    assert [b.id for b in await store.batch_list(10, offset=2)] == newest_first[2:]


async def test_a_listing_by_batch_id_gives_its_members(store: Store) -> None:
    mine, done = members(3), callback()
    batch = await insert_batch(store, mine, done)
    theirs = await insert_batch(store, members(2, created_at=T0 + 1), created_at=T0 + 1)

    listed = await store.job_list(JobFilter(batch_id=batch.id, oldest_first=True, limit=10))
    assert sorted(ids(listed)) == sorted(ids(mine))
    other = await store.job_list(JobFilter(batch_id=theirs.id, limit=10))
    assert len(other) == 2
    assert not set(ids(other)) & set(ids(mine))


async def test_pruning_finished_members_keeps_the_counts(store: Store) -> None:
    made = [*members(2), new_job(5, key="keyed")]  # a keyed one becomes a tombstone
    batch = await insert_batch(store, made, callback())
    assert len(await complete_all(store, T0, 3)) == 3
    before = await record(store, batch)

    pruned = await store.job_prune(
        PruneRequest(now=T0 + 10 * DAY, limit=100, queue=QUEUE, completed_before=T0 + DAY)
    )

    assert (pruned.deleted, pruned.tombstoned) == (2, 1)
    assert (await status(store, made[2])).state is JobState.PRUNED
    assert await record(store, batch) == before
    assert counts(before) == (3, 0, 0, 0)
