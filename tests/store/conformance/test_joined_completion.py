"""``job_complete_joined`` and ``job_completed_under``: a job completed inside a transaction the
caller owns, with the fence, result and attempt record of ``job_complete_many``, committed only
by the caller's commit."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from uuid import uuid4

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from caravel.errors import ValidationError
from caravel.jobs import JobState
from caravel.store.protocol import Recorder, Store
from caravel.store.urls import async_url
from tests.store.conformance.builders import T0, claim_one, insert, new_job, ref, status

BY = Recorder(worker_id=uuid4(), host="host-a", pid=4242, attempt_history=20)


@pytest.fixture
async def caller(db_url: str) -> AsyncIterator[AsyncEngine]:
    """The caller's own engine on the queue's database (a memory queue has none)."""
    if db_url.startswith("memory://"):
        pytest.skip("a memory queue has no database to share a transaction with")
    engine = create_async_engine(async_url(db_url))
    yield engine
    await engine.dispose()


async def test_anything_but_a_session_of_the_queue_is_refused(store: Store) -> None:
    job = new_job()
    await insert(store, [job])
    lease = (await claim_one(store, T0)).lease
    with pytest.raises(ValidationError) as caught:
        await store.job_complete_joined(object(), lease, T0 + 1)
    assert caught.value.field == "session"
    assert (await status(store, job)).state is JobState.RUNNING
    assert await store.job_completed_under(lease) is False
    assert await store.job_complete_many([lease], T0 + 2) == {job.id}
    assert await store.job_completed_under(lease) is True
    other = dataclasses.replace(lease, nonce=lease.nonce + 1)
    assert await store.job_completed_under(other) is False


async def test_the_completion_commits_with_the_callers_transaction(
    store: Store, caller: AsyncEngine
) -> None:
    joined, plain = new_job(), new_job()
    await insert(store, [joined, plain])
    first = (await claim_one(store, T0)).lease
    second = (await claim_one(store, T0)).lease
    by_job = {first.job_id: first, second.job_id: second}
    lease, other = by_job[joined.id], by_job[plain.id]

    async with caller.connect() as conn:
        held = await store.job_complete_joined(conn, lease, T0 + 10, result='{"n":1}', recorder=BY)
        assert held is True
        # Not before the caller commits.
        assert (await status(store, joined)).state is JobState.RUNNING
        assert await store.job_completed_under(lease) is False
        await conn.commit()

    assert await store.job_completed_under(lease) is True
    done = await status(store, joined)
    assert (done.state, done.finished_at) == (JobState.COMPLETED, done.updated_at)
    assert await store.job_get_result(ref(joined)) == '{"n":1}'
    # The attempt's record reads as the acknowledger's completion does.
    assert await store.job_complete_many([other], T0 + 10, recorder=BY) == {plain.id}
    (mine,) = await store.job_attempts(ref(joined)) or []
    (theirs,) = await store.job_attempts(ref(plain)) or []
    assert dataclasses.replace(mine, lease_token=0) == dataclasses.replace(theirs, lease_token=0)


async def test_a_rollback_leaves_the_lease_held(store: Store, caller: AsyncEngine) -> None:
    job = new_job()
    await insert(store, [job])
    lease = (await claim_one(store, T0)).lease
    async with caller.connect() as conn:
        assert await store.job_complete_joined(conn, lease, T0 + 10) is True
        await conn.rollback()
    assert (await status(store, job)).state is JobState.RUNNING
    assert await store.job_completed_under(lease) is False
    assert await store.job_complete_many([lease], T0 + 20) == {job.id}  # completed once


async def test_a_superseded_lease_changes_nothing(store: Store, caller: AsyncEngine) -> None:
    job = new_job()
    await insert(store, [job])
    old = (await claim_one(store, T0, lease_ms=1_000)).lease
    current = (await claim_one(store, T0 + 1_000)).lease
    async with caller.connect() as conn:
        assert await store.job_complete_joined(conn, old, T0 + 1_500) is False
        await conn.commit()
    assert (await status(store, job)).state is JobState.RUNNING
    assert await store.job_completed_under(old) is False
    assert await store.job_complete_many([current], T0 + 1_600) == {job.id}
    assert await store.job_completed_under(old) is False
    assert await store.job_completed_under(current) is True
