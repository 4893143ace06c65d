"""``job_insert_blocking``: one job from a thread other than the store's loop (the sync facade's
one-job enqueue), settled by the rules of ``job_insert_many``, whether the store inserts on the
calling thread or hands the job to its loop (a repeat, a conflict, a pending key)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from caravel.clock import from_ms
from caravel.errors import IdempotencyConflictError
from caravel.jobs import JobState
from caravel.store.protocol import InsertOutcome, InsertResult, NewJob, Store
from tests.store.conformance.builders import T0, everything, new_job, payload, status


async def blocking(store: Store, job: NewJob) -> InsertResult:
    """``job`` inserted from a thread of its own while this loop, the store's, keeps running."""
    return await asyncio.to_thread(store.job_insert_blocking, job, asyncio.get_running_loop())


async def test_a_job_lands_with_the_values_given(store: Store) -> None:
    job = new_job(
        1,
        key="k1",
        due_at=T0 + 5_000,
        trace_context='{"traceparent":"00-ab-cd-01"}',
        priority=7,
        partition_key="p",
        weight=3,
    )

    result = await blocking(store, job)

    assert result.jobs == [job]
    assert result.outcomes == [InsertOutcome(job.id, inserted=True)]
    got = await status(store, job)
    assert (got.state, got.attempt, got.max_attempts) == (JobState.READY, 0, job.max_attempts)
    assert (got.due_at, got.created_at) == (from_ms(T0 + 5_000), from_ms(T0))
    assert got.priority == 7


async def test_a_repeat_names_the_original_and_a_conflict_is_refused(store: Store) -> None:
    original = new_job(1, key="k1")
    await blocking(store, original)

    repeat = await blocking(store, new_job(1, key="k1", created_at=T0 + 1))
    assert repeat.outcomes == [InsertOutcome(original.id, inserted=False)]
    again = await blocking(store, original)  # the same id too
    assert again.outcomes == [InsertOutcome(original.id, inserted=False)]
    with pytest.raises(IdempotencyConflictError) as caught:
        await blocking(store, new_job(2, key="k1", body=payload(n=2), created_at=T0 + 2))
    assert caught.value.job_id == original.id
    assert [s.job_id for s in await everything(store)] == [original.id]


async def test_a_pending_key_is_settled_against_the_pending_job(store: Store) -> None:
    first = new_job(1, due_at=T0 + 9_000)._replace(pending_key="pk")
    second = new_job(2, created_at=T0 + 10)._replace(pending_key="pk")
    await blocking(store, first)

    result = await blocking(store, second)

    assert result.outcomes == [InsertOutcome(first.id, inserted=False)]
    assert [s.job_id for s in await everything(store)] == [first.id]


async def test_threads_at_once_make_one_job_per_key(store: Store) -> None:
    loop = asyncio.get_running_loop()
    start = threading.Barrier(4)

    def produce(thread: int) -> list[InsertResult]:
        start.wait()
        return [
            store.job_insert_blocking(new_job(n, key=f"k{n}", created_at=T0 + thread), loop)
            for n in range(5)
        ]

    results = await asyncio.gather(*(asyncio.to_thread(produce, t) for t in range(4)))

    stored = await everything(store)
    assert len(stored) == 5
    for n in range(5):  # every thread got the one job of each key
        assert len({per_thread[n].outcomes[0].job_id for per_thread in results}) == 1
    assert {rs[n].outcomes[0].job_id for rs in results for n in range(5)} == {
        s.job_id for s in stored
    }
    assert sum(r.outcomes[0].inserted for rs in results for r in rs) == 5
