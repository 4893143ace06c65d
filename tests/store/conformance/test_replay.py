"""``job_replay``: a dead letter, named by its exact id, queue and tenant, becomes a new job
under the same id: ready, due at the replay, its attempts reset. Anything else is refused and left
as it was."""

from __future__ import annotations

from uuid import uuid4

import pytest

from caravel.clock import from_ms
from caravel.jobs import JobState
from caravel.store.protocol import JobRef, Store, ThroughputQuery
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


@pytest.mark.parametrize("how", ["failed", "lease-expired"])
async def test_replay_makes_a_dead_letter_ready_again(store: Store, how: str) -> None:
    job = new_job(max_attempts=2, due_at=T0 + 5)
    await insert(store, [job])
    if how == "failed":
        lease = (await claim_one(store, T0 + 5)).lease
        assert await fail(store, lease, T0 + 10, None) == {job.id}
    else:  # both attempts' leases ran out
        await claim_one(store, T0 + 5, lease_ms=1_000)
        await claim_one(store, T0 + 1_005, lease_ms=1_000)
        assert (await claim(store, T0 + 2_005)).dead_lettered == 1
    assert (await status(store, job)).state is JobState.DEAD_LETTER

    assert await store.job_replay(ref(job), T0 + 9_000) is True

    got = await status(store, job)
    assert (got.state, got.attempt, got.max_attempts) == (JobState.READY, 0, 2)
    assert got.due_at == got.updated_at == from_ms(T0 + 9_000)
    assert (got.started_at, got.finished_at, got.lease_expires_at) == (None, None, None)
    assert got.last_failure is None
    assert got.created_at == from_ms(T0)
    assert await store.job_get_payload(ref(job)) == job.payload
    # No longer a failure in the throughput figures.
    window = ThroughputQuery(None, T0, T0 + 10_000, 1_000)
    assert await store.job_throughput(window) == []
    # Due at the replay, with its whole attempt budget again.
    assert (await claim(store, T0 + 8_999)).claimed == []
    again = await claim_one(store, T0 + 9_000)
    assert (again.job_id, again.attempt, again.due_at_ms) == (job.id, 1, T0 + 9_000)
    assert await store.job_replay(ref(job), T0 + 9_001) is False  # running now


@pytest.mark.parametrize("state", ["ready", "running", "completed"])
async def test_replay_refuses_a_job_that_is_not_a_dead_letter(store: Store, state: str) -> None:
    job = new_job()
    await insert(store, [job])
    if state != "ready":
        lease = (await claim_one(store, T0)).lease
        if state == "completed":
            assert await store.job_complete_many([lease], T0 + 1) == {job.id}
    before = await status(store, job)

    assert await store.job_replay(ref(job), T0 + 100) is False

    assert await status(store, job) == before


async def test_replay_needs_the_exact_queue_and_tenant(store: Store) -> None:
    job = new_job()
    await insert(store, [job])
    assert await fail(store, (await claim_one(store, T0)).lease, T0 + 1, None) == {job.id}
    before = await status(store, job)

    for wrong in [
        JobRef(job.id, "other", TENANT),
        JobRef(job.id, QUEUE, "tenant-b"),
        JobRef(job.id, QUEUE, "Tenant-A"),
        JobRef(uuid4(), QUEUE, TENANT),
    ]:
        assert await store.job_replay(wrong, T0 + 100) is False, wrong

    assert await status(store, job) == before
    assert await store.job_replay(ref(job), T0 + 100) is True
