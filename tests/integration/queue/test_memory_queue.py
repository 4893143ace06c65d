"""The in-memory store end to end: a :class:`DatabaseQueue` on ``memory://``, a
:class:`QueueWorker` in the same process claiming from it, and a :class:`QueueInspector` reading
it; ``memory://NAME`` shared by name, ``memory://`` private every time it is opened.

Time moves only with the :class:`ManualClock`; nothing waits for wall time.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest

from caravel import (
    DatabaseQueue,
    JobContext,
    JobState,
    QueueInspector,
    QueueWorker,
    ValidationError,
    migrate,
)
from caravel.store import open_outbox_store
from caravel.testing import ManualClock
from tests.support import Add, dispatch, make_registry, open_queue, registry_for, status_of


def shared_name() -> str:
    """A ``memory://NAME`` no other test uses (named queues last as long as the process)."""
    return f"memory://test-{uuid4().hex}"


async def test_a_worker_runs_jobs_to_success_retry_dead_letter_and_replay() -> None:
    clock = ManualClock()
    ran: list[tuple[int, int]] = []

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        ran.append((job.amount, ctx.attempt))
        if job.amount < 0:
            raise RuntimeError("refused")

    url = shared_name()
    async with (
        open_queue(url, registry_for(handle), clock=clock, max_attempts=2) as queue,
        QueueWorker(queue) as worker,
        QueueInspector(url, clock=clock) as inspector,
    ):
        good = await queue.enqueue(Add(1), dispatch())
        bad = await queue.enqueue(Add(-1), dispatch())
        assert (await inspector.queue_counts("default"))[0].ready == 2

        assert await worker.run_once("default") is True
        assert await worker.run_once("default") is True
        assert (await status_of(queue, good.job_id)).state is JobState.COMPLETED
        failed = await status_of(queue, bad.job_id)
        assert (failed.state, failed.attempt, failed.last_failure) == (
            JobState.READY,
            1,
            "HandlerFailed",
        )
        assert await worker.run_once("default") is False  # the retry is not due yet

        await clock.advance(timedelta(minutes=10))
        assert await worker.run_once("default") is True
        dead = await status_of(queue, bad.job_id)
        assert (dead.state, dead.attempt) == (JobState.DEAD_LETTER, 2)
        counts = (await inspector.queue_counts("default"))[0]
        assert (counts.ready, counts.completed, counts.dead_letter) == (0, 1, 1)

        assert await queue.replay(bad.job_id, "default", "tenant-a") is True
        replayed = await status_of(queue, bad.job_id)
        assert (replayed.state, replayed.attempt) == (JobState.READY, 0)
        assert await worker.run_once("default") is True
        assert ran == [(1, 1), (-1, 1), (-1, 2), (-1, 1)]
        listed = await inspector.list_jobs(queue="default")
        assert {job.job_id for job in listed} == {good.job_id, bad.job_id}


async def test_queues_opened_on_one_name_share_their_jobs() -> None:
    url = shared_name()
    async with open_queue(url) as producer, open_queue(url) as consumer:
        accepted = await producer.enqueue(Add(7), dispatch(key="once"))
        again = await consumer.enqueue(Add(7), dispatch(key="once"))
        assert (again.job_id, again.already_enqueued) == (accepted.job_id, True)
        async with QueueWorker(consumer) as worker:
            assert await worker.run_once("default") is True
        assert (await status_of(producer, accepted.job_id)).state is JobState.COMPLETED
    # The named queue outlives its queues: a later one in the process still sees the job.
    async with open_queue(url) as later:
        assert (await status_of(later, accepted.job_id)).state is JobState.COMPLETED


async def test_every_private_memory_queue_is_its_own() -> None:
    async with open_queue("memory://") as first, open_queue("memory://") as second:
        accepted = await first.enqueue(Add(1), dispatch())
        assert await second.get_status(accepted.job_id, "default", "tenant-a") is None
        async with QueueWorker(second) as worker:
            assert await worker.run_once("default") is False
        assert (await status_of(first, accepted.job_id)).state is JobState.READY
    async with QueueInspector("memory://") as inspector:
        assert await inspector.queue_counts() == []


async def test_the_schema_is_always_current_and_never_migrated() -> None:
    async with DatabaseQueue("memory://", make_registry()) as queue:
        await queue.check_schema()
    for call in (migrate.upgrade, migrate.current, migrate.check):
        with pytest.raises(ValidationError) as caught:
            call("memory://")
        assert caught.value.field == "url"
        assert "needs no migrations" in caught.value.rule


@pytest.mark.parametrize(
    "url", ["memory:///name", "memory://a/b", "memory://a?x=1", "memory://u@a"]
)
def test_a_memory_url_is_a_name_at_most(url: str) -> None:
    with pytest.raises(ValidationError) as caught:
        DatabaseQueue(url, make_registry())
    assert caught.value.field == "url"


def test_the_outbox_needs_the_applications_own_database() -> None:
    with pytest.raises(ValidationError) as caught:
        open_outbox_store("memory://", "outbox")
    assert caught.value.field == "url"


def test_threads_with_their_own_event_loops_share_a_named_queue_safely() -> None:
    # Each thread enqueues the same keys: whichever thread comes first makes the job.
    url = shared_name()
    keys = [f"k-{n}" for n in range(100)]
    found: list[set[UUID]] = []

    async def enqueue_all() -> None:
        async with open_queue(url) as queue:
            found.append({(await queue.enqueue(Add(1), dispatch(key))).job_id for key in keys})

    threads = [threading.Thread(target=asyncio.run, args=(enqueue_all(),)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(found) == 4
    assert all(ids == found[0] for ids in found)  # every thread was given the same jobs
    assert len(found[0]) == len(keys)
