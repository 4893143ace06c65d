"""``job_prune``: one bounded batch removes old finished jobs. A keyless job is deleted; a keyed
one becomes a tombstone in its own row, so a repeated submission under its key still returns the
original id and a different one still conflicts, until the tombstone itself expires. Young and
live jobs are never touched."""

from __future__ import annotations

import pytest

from caravel.clock import from_ms
from caravel.errors import IdempotencyConflictError
from caravel.jobs import JobState
from caravel.store.protocol import JobFilter, Store
from caravel.store.pruning import PruneBatch, PruneRequest
from tests.store.conformance.builders import (
    QUEUE,
    T0,
    claim,
    claim_one,
    everything,
    fail,
    ids,
    insert,
    new_job,
    ref,
    status,
)

DAY = 86_400_000


async def finish(store: Store, count: int, at: int, *, keyed: bool, start: int = 0, **kw: object):
    """``count`` jobs created and completed at ``at``."""
    jobs = [
        new_job(n, key=f"k-{n}" if keyed else None, created_at=at, **kw)  # type: ignore[arg-type]
        for n in range(start, start + count)
    ]
    await insert(store, jobs)
    batch = await claim(store, at, count, queue=jobs[0].queue)
    leases = [job.lease for job in batch.claimed]
    assert len(leases) == count
    assert await store.job_complete_many(leases, at) == {job.id for job in jobs}
    return jobs


def completed_after(days: int, now: int, **fields: object) -> PruneRequest:
    return PruneRequest(now=now, limit=1_000, completed_before=now - days * DAY, **fields)  # type: ignore[arg-type]


async def test_a_keyed_job_becomes_a_tombstone_that_keeps_its_id_on_repeat(store: Store) -> None:
    [job] = await finish(store, 1, T0, keyed=True)
    now = T0 + 10 * DAY

    assert await store.job_prune(completed_after(7, now)) == PruneBatch(tombstoned=1)

    got = await status(store, job)
    assert got.state is JobState.PRUNED
    assert (got.job_id, got.queue, got.tenant_id, got.job_type) == (
        job.id,
        job.queue,
        job.tenant_id,
        job.job_type,
    )
    assert (got.created_at, got.finished_at, got.updated_at) == (
        from_ms(T0),
        from_ms(T0),
        from_ms(now),
    )
    assert got.last_failure is None
    assert await store.job_get_payload(ref(job)) is None
    assert await store.job_replay(ref(job), now) is False
    # The same submission again: the original job, nothing new inserted.
    again = new_job(0, key="k-0", created_at=now)
    result = await insert(store, [again])
    assert [(o.job_id, o.inserted) for o in result.outcomes] == [(job.id, False)]
    assert (await claim(store, now)).claimed == []
    assert ids(await everything(store)) == [job.id]


async def test_a_different_payload_under_a_pruned_key_still_conflicts(store: Store) -> None:
    [job] = await finish(store, 1, T0, keyed=True)
    await store.job_prune(completed_after(7, T0 + 10 * DAY))

    for other in (
        new_job(1, key="k-0", created_at=T0 + 10 * DAY),  # another payload
        new_job(0, key="k-0", created_at=T0 + 10 * DAY, job_type="tests.other.v1"),
    ):
        with pytest.raises(IdempotencyConflictError) as raised:
            await insert(store, [other, new_job(9, key="fresh", created_at=T0 + 10 * DAY)])
        assert raised.value.job_id == job.id
    assert ids(await everything(store)) == [job.id]  # the batch rolled back whole


async def test_a_keyless_job_is_deleted(store: Store) -> None:
    jobs = await finish(store, 3, T0, keyed=False)

    assert await store.job_prune(completed_after(7, T0 + 8 * DAY)) == PruneBatch(deleted=3)

    assert await everything(store) == []
    assert await store.job_get(ref(jobs[0])) is None


async def test_young_finished_and_live_jobs_are_kept(store: Store) -> None:
    old = await finish(store, 2, T0, keyed=False)
    young = await finish(store, 2, T0 + 5 * DAY, keyed=True, start=10)
    ready = new_job(20, created_at=T0, due_at=T0 + 30 * DAY)
    running = new_job(21, created_at=T0)
    await insert(store, [ready, running])
    await claim_one(store, T0 + 6 * DAY)
    dead = new_job(22, key="d", max_attempts=1, created_at=T0)
    await insert(store, [dead])
    assert await fail(store, (await claim_one(store, T0 + 6 * DAY)).lease, T0, None) == {dead.id}
    now = T0 + 8 * DAY

    assert await store.job_prune(completed_after(7, now)) == PruneBatch(deleted=2)

    kept = {got.job_id: got.state for got in await everything(store)}
    assert set(kept) == {*ids(young), ready.id, running.id, dead.id}
    assert set(kept.values()) == {
        JobState.COMPLETED,
        JobState.READY,
        JobState.RUNNING,
        JobState.DEAD_LETTER,
    }
    assert [await store.job_get(ref(job)) for job in old] == [None, None]


async def test_each_end_state_has_its_own_age(store: Store) -> None:
    [done] = await finish(store, 1, T0, keyed=True)
    dead = new_job(5, key="d", max_attempts=1, created_at=T0)
    await insert(store, [dead])
    assert await fail(store, (await claim_one(store, T0)).lease, T0, None) == {dead.id}
    now = T0 + 10 * DAY

    only_dead = PruneRequest(now=now, limit=100, dead_letter_before=now - 9 * DAY)
    assert await store.job_prune(only_dead) == PruneBatch(tombstoned=1)
    assert (await status(store, dead)).state is JobState.PRUNED
    assert (await status(store, done)).state is JobState.COMPLETED
    # Dead letters kept longer than completed jobs: 30 days for them, 7 for completed ones.
    policy = PruneRequest(
        now=now, limit=100, completed_before=now - 7 * DAY, dead_letter_before=now - 30 * DAY
    )
    assert await store.job_prune(policy) == PruneBatch(tombstoned=1)
    assert (await status(store, done)).state is JobState.PRUNED


async def test_tombstones_expire_after_the_key_retention(store: Store) -> None:
    [job] = await finish(store, 1, T0, keyed=True)
    pruned_at = T0 + 10 * DAY
    await store.job_prune(completed_after(7, pruned_at))
    keys = PruneRequest(now=pruned_at + 29 * DAY, limit=100, tombstones_before=pruned_at - DAY)

    assert await store.job_prune(keys) == PruneBatch()  # pruned 29 days ago; kept for 30
    assert (await status(store, job)).state is JobState.PRUNED

    later = pruned_at + 31 * DAY
    expire = PruneRequest(now=later, limit=100, tombstones_before=later - 30 * DAY)
    assert await store.job_prune(expire) == PruneBatch(tombstones_deleted=1)
    assert await store.job_get(ref(job)) is None
    # Duplicate protection for that key has ended: the same key makes a new job.
    fresh = new_job(1, key="k-0", created_at=later)
    result = await insert(store, [fresh])
    assert [(o.job_id, o.inserted) for o in result.outcomes] == [(fresh.id, True)]


async def test_a_batch_touches_at_most_its_limit(store: Store) -> None:
    await finish(store, 5, T0, keyed=True)
    await finish(store, 4, T0, keyed=False, start=10, queue="other")
    now = T0 + 8 * DAY
    request = PruneRequest(now=now, limit=3, completed_before=now - 7 * DAY)

    preview = await store.job_prune(
        PruneRequest(now=now, limit=3, completed_before=now - 7 * DAY, dry_run=True)
    )
    assert preview == PruneBatch(deleted=4, tombstoned=5)
    assert len(await everything(store, state=JobState.COMPLETED)) == 9  # a dry run changes nothing

    batches = []
    while (batch := await store.job_prune(request)).total:
        batches.append(batch)
    assert [b.total for b in batches] == [3, 3, 3]
    assert sum(b.deleted for b in batches) == 4
    assert sum(b.tombstoned for b in batches) == 5
    assert await everything(store, state=JobState.COMPLETED) == []


async def test_one_queue_only(store: Store) -> None:
    [mine] = await finish(store, 1, T0, keyed=False)
    [theirs] = await finish(store, 1, T0, keyed=False, queue="other")
    now = T0 + 8 * DAY

    assert await store.job_prune(completed_after(7, now, queue=QUEUE)) == PruneBatch(deleted=1)

    assert ids(await everything(store)) == [theirs.id]
    assert await store.job_get(ref(mine)) is None


async def test_tombstones_are_not_counted_or_shown_as_completed(store: Store) -> None:
    await finish(store, 2, T0, keyed=True)
    now = T0 + 8 * DAY
    await store.job_prune(completed_after(7, now))

    [counts] = await store.queue_counts(None, now)
    assert (counts.queue, counts.completed, counts.dead_letter, counts.ready) == (QUEUE, 0, 0, 0)
    assert await store.job_list(JobFilter(shown="completed", now=now)) == []
    pruned = await store.job_list(JobFilter(state=JobState.PRUNED))
    assert {got.state for got in pruned} == {JobState.PRUNED}
    assert len(pruned) == 2
