"""``queue_signal``: what an autoscaler reads per queue at a moment (jobs due now, jobs with a
live lease, the oldest due time, jobs finished in a window, the workers heard from in a window),
the same on every store."""

from __future__ import annotations

from caravel.limits import HELD_DUE_AT
from caravel.store.protocol import Heartbeat, QueueSignal, ReadStore, SignalQuery, Store
from tests.store.conformance.builders import (
    T0,
    claim_one,
    fail,
    insert,
    new_job,
    ref,
    worker,
)

MINUTE = 60_000


def _query(now: int, queue: str | None = None) -> SignalQuery:
    return SignalQuery(queue, now, now - MINUTE, now - MINUTE)


async def _finish(store: Store, queue: str, at: int, *, ok: bool = True) -> None:
    """A job of ``queue`` completed (or dead-lettered) at ``at``."""
    job = new_job(at, queue=queue, created_at=at - 1, max_attempts=1)
    await insert(store, [job])
    lease = (await claim_one(store, at - 1, queue=queue)).lease
    if ok:
        assert await store.job_complete_many([lease], at) == {job.id}
    else:
        assert await fail(store, lease, at, None) == {job.id}


async def test_an_empty_queue_database_gives_no_signal(store: Store) -> None:
    assert await store.queue_signal(_query(T0)) == []
    assert await store.queue_signal(_query(T0, "default")) == []


async def test_ready_running_and_the_oldest_due_job_are_judged_at_now(store: Store) -> None:
    now = T0 + 10 * MINUTE
    await insert(
        store,
        [
            new_job(1, queue="a", created_at=T0 + 1_000),  # due, the oldest
            new_job(2, queue="a", created_at=T0 + 2_000),  # due
            new_job(3, queue="a", created_at=T0, due_at=now + 1),  # delayed: not ready
            new_job(4, queue="a", created_at=T0, due_at=HELD_DUE_AT),  # held: not ready
            new_job(5, queue="b", created_at=T0 + 3_000),
            new_job(6, queue="b", created_at=T0 + 4_000),
        ],
    )
    # Queue b: one job claimed with a lease still live at now, one whose lease ended by now.
    await claim_one(store, now - 1_000, queue="b", lease_ms=10_000)
    await claim_one(store, now - 1_000, queue="b", lease_ms=1_000)

    assert await store.queue_signal(_query(now)) == [
        QueueSignal("a", ready=2, running=0, oldest_ready_due_ms=T0 + 1_000, finished=0, workers=0),
        QueueSignal("b", ready=0, running=1, oldest_ready_due_ms=None, finished=0, workers=0),
    ]
    assert await store.queue_signal(_query(now, "b")) == [
        QueueSignal("b", ready=0, running=1, oldest_ready_due_ms=None, finished=0, workers=0),
    ]


async def test_finished_jobs_count_within_the_window_only(store: Store) -> None:
    now = T0 + 10 * MINUTE
    await _finish(store, "a", now - MINUTE - 1)  # before the window
    await _finish(store, "a", now - MINUTE)  # the window's first moment
    await _finish(store, "a", now - 5, ok=False)  # dead-lettered counts too
    await _finish(store, "a", now + 1)  # after now: not yet
    await _finish(store, "c", now - 1)
    cancelled = new_job(9, queue="c", created_at=now - 2)
    await insert(store, [cancelled])
    await store.job_cancel(ref(cancelled), now - 1)

    signal = await store.queue_signal(_query(now))
    assert [(s.queue, s.ready, s.finished) for s in signal] == [("a", 0, 2), ("c", 0, 1)]
    assert [s.finished for s in await store.queue_signal(_query(now, "a"))] == [2]


async def test_workers_count_for_each_queue_they_serve_while_heard_from(store: Store) -> None:
    now = T0 + 10 * MINUTE
    both = worker(now - 5_000, ("a", "b"))
    only_b = worker(now - 4_000, ("b",))
    quiet = worker(now - MINUTE - 1, ("a",))  # last heard from before the window
    stopped = worker(now - 3_000, ("a",))
    for each in (both, only_b, quiet, stopped):
        await store.worker_register(each)
    await store.worker_heartbeat(Heartbeat(stopped.id, now - 2_000, 0, stopped=True))
    await insert(store, [new_job(1, queue="a", created_at=now - 100)])

    assert await store.queue_signal(_query(now)) == [
        QueueSignal("a", ready=1, running=0, oldest_ready_due_ms=now - 100, finished=0, workers=1),
        QueueSignal("b", ready=0, running=0, oldest_ready_due_ms=None, finished=0, workers=2),
    ]
    assert await store.queue_signal(_query(now, "b")) == [
        QueueSignal("b", ready=0, running=0, oldest_ready_due_ms=None, finished=0, workers=2),
    ]


async def test_a_reader_gives_the_same_signal(store: Store, reader: ReadStore) -> None:
    await insert(store, [new_job(1, created_at=T0)])
    await claim_one(store, T0 + 1)
    assert await reader.queue_signal(_query(T0 + 2)) == await store.queue_signal(_query(T0 + 2))
