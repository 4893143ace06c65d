"""Enqueue and idempotency, on every database."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from sqlalchemy.engine import make_url

from caravel import (
    DatabaseQueue,
    IdempotencyConflictError,
    JobState,
    Leases,
    QueueInspector,
    QueueWorker,
    StoreError,
    UnknownJobTypeError,
)
from caravel.clock import from_ms, to_ms_ceil
from caravel.store.postgresql.notifications import CHANNEL
from caravel.store.protocol import JobFilter
from caravel.testing import ManualClock
from tests.support import Add, Report, dispatch, make_registry, open_queue, status_of, until
from tests.support.databases import pg_listeners, until_listening


async def test_enqueue_returns_id_and_stores_ready_job(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        result = await queue.enqueue(Add(1), dispatch("k1"))
        assert result.already_enqueued is False
        status = await queue.get_status(result.job_id, "default", "tenant-a")
        assert status is not None
        assert status.state is JobState.READY
        assert status.attempt == 0
        assert status.max_attempts == 3
        assert status.job_type == "tests.add.v1"


async def test_same_key_same_payload_returns_original_even_after_completion(db_url: str) -> None:
    clock = ManualClock()
    async with open_queue(db_url, clock=clock) as queue:
        first = await queue.enqueue(Add(1), dispatch("k1"))
        claimed = await Leases(queue).claim("default")
        assert claimed is not None
        await Leases(queue).complete(claimed.lease)
        await clock.advance(timedelta(hours=1))
        again = await queue.enqueue(
            Add(1), dispatch("k1", not_before=datetime(2040, 1, 1, tzinfo=UTC))
        )
        assert again.job_id == first.job_id
        assert again.already_enqueued is True
        status = await queue.get_status(first.job_id, "default", "tenant-a")
        assert status is not None
        assert status.state is JobState.COMPLETED
        assert status.attempt == 1
        assert status.due_at.year == 2030  # the duplicate did not move the due time


@pytest.mark.parametrize(
    "second",
    [Add(2), Add(1, note="x"), Report(report_id="r")],
    ids=["other-value", "other-field", "other-type"],
)
async def test_same_key_different_content_conflicts_and_writes_nothing(
    db_url: str, second: object
) -> None:
    async with open_queue(db_url) as queue:
        first = await queue.enqueue(Add(1), dispatch("k1"))
        with pytest.raises(IdempotencyConflictError) as caught:
            await queue.enqueue(second, dispatch("k1"))
        assert caught.value.job_id == first.job_id
        jobs = await queue.store.job_list(filter_all())
        assert [j.job_id for j in jobs] == [first.job_id]


async def test_keys_are_scoped_by_queue_and_tenant(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        a = await queue.enqueue(Add(1), dispatch("k"))
        b = await queue.enqueue(Add(1), dispatch("k", queue="other"))
        c = await queue.enqueue(Add(1), dispatch("k", tenant="tenant-b"))
        d = await queue.enqueue(Add(1), dispatch("k", tenant="Tenant-A"))
        assert len({a.job_id, b.job_id, c.job_id, d.job_id}) == 4


async def test_without_key_every_enqueue_is_new(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        a = await queue.enqueue(Add(1), dispatch())
        b = await queue.enqueue(Add(1), dispatch())
        assert a.job_id != b.job_id
        assert not a.already_enqueued
        assert not b.already_enqueued


async def test_unregistered_type_is_rejected(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        with pytest.raises(UnknownJobTypeError):
            await queue.enqueue({"amount": 1}, dispatch("k"))
        assert await queue.store.job_list(filter_all()) == []


async def test_fifty_concurrent_enqueues_with_one_key_make_one_job(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        results = await asyncio.gather(
            *(queue.enqueue(Add(7), dispatch("race")) for _ in range(50))
        )
        assert len({r.job_id for r in results}) == 1
        assert sum(1 for r in results if not r.already_enqueued) == 1
        assert len(await queue.store.job_list(filter_all())) == 1


def filter_all() -> JobFilter:
    return JobFilter(limit=1000)


@pytest.mark.postgres
async def test_enqueues_within_the_notify_cooldown_share_one_trailing_wakeup(pg_url: str) -> None:
    """The first enqueue after a quiet cooldown carries the NOTIFY; the ones right behind it send
    none of their own, and one trailing NOTIFY follows a cooldown after the last of them
    committed, so a listening worker always hears about the last job."""
    async with open_queue(pg_url) as queue:
        announcer = queue.store.inner._announcer
        announcer.cooldown = 1.5  # wide enough that three enqueues fit in it on a loaded machine
        loop = asyncio.get_running_loop()
        heard: list[float] = []
        feed = queue.store.wakeups(["default", "other"])
        assert feed is not None

        async def listen() -> None:
            async for name in feed:
                assert name == "default"
                heard.append(loop.time())

        listening = await pg_listeners(pg_url, CHANNEL)
        listener = asyncio.create_task(listen())
        try:
            await until_listening(pg_url, CHANNEL, beyond=listening)
            started = loop.time()
            for n in range(3):
                await queue.enqueue(Add(n), dispatch())
            last_returned = loop.time()
            assert last_returned - started < 1.5
            await until(lambda: len(heard) >= 1, what="the leading NOTIFY")
            assert len(heard) == 1  # the leading enqueue's own NOTIFY, at its commit
            # The leading NOTIFY, not the trailing one (which comes a cooldown after the last
            # commit); on a loaded machine it may be delivered after the enqueues returned.
            assert heard[0] - last_returned < 1.4
            await until(lambda: len(heard) >= 2, what="the trailing NOTIFY")
            assert len(heard) == 2  # and one trailing NOTIFY, not one per enqueue
            assert heard[1] - last_returned >= 1.4
            # A delayed job announces nothing: polling picks it up when it comes due.
            tomorrow = from_ms(queue.clock.now_ms()) + timedelta(days=1)
            await queue.enqueue(Add(9), dispatch(not_before=tomorrow))
            # Nothing to wait for: a NOTIFY it sent would come at its commit, within this
            # second of real time (the announcer times its cooldown on the event loop's clock).
            await asyncio.sleep(1.0)
            assert len(heard) == 2
        finally:
            listener.cancel()
            await asyncio.gather(listener, return_exceptions=True)


@pytest.mark.postgres
async def test_an_enqueue_stuck_past_the_deadline_is_cut(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The one-job enqueue's statement waits on a lock another session holds: once the store's
    deadline has passed its connection is cut (a StoreError, not the server's 30 s statement
    timeout), and the next enqueue gets a working connection."""
    async with open_queue(pg_url) as queue:
        await queue.enqueue(Add(0), dispatch())  # a steady stream of deadlines of the default
        store = queue.store.inner
        store.operation_timeout = 0.5
        dsn = make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)
        async with await psycopg.AsyncConnection.connect(dsn) as holder:
            await holder.execute("LOCK TABLE caravel_jobs IN ACCESS EXCLUSIVE MODE")
            with (
                caplog.at_level(logging.WARNING, "caravel.store"),
                pytest.raises(StoreError) as caught,
            ):
                await queue.enqueue(Add(1), dispatch())
            await holder.rollback()
        assert not isinstance(caught.value.__cause__, psycopg.errors.QueryCanceled)
        assert "exceeded its deadline" in caplog.text
        store.operation_timeout = 45.0
        assert (await queue.enqueue(Add(2), dispatch())).already_enqueued is False


async def test_closing_a_queue_an_inspector_or_a_worker_twice_is_harmless(db_url: str) -> None:
    queue = DatabaseQueue(db_url, make_registry())
    await queue.enqueue(Add(1), dispatch())
    worker = QueueWorker(queue)
    assert await worker.run_once("default") is True
    inspector = QueueInspector(db_url)
    assert (await inspector.queue_counts())[0].completed == 1
    for closeable in (worker, queue, inspector):
        await closeable.close()
        await closeable.close()


async def test_a_delay_makes_the_job_due_that_long_after_the_enqueue_rounded_up(
    db_url: str,
) -> None:
    clock = ManualClock()
    async with open_queue(db_url, make_registry(), clock=clock) as queue:
        before = clock.now_ms()
        made = await queue.enqueue(Add(1), dispatch(delay=timedelta(seconds=90, microseconds=1)))
        status = await status_of(queue, made.job_id)
        # 90 s and a microsecond: the due time rounds up to the next millisecond.
        assert to_ms_ceil(status.due_at) == before + 90_001
        leases = Leases(queue)
        await clock.advance(timedelta(seconds=90))
        assert await leases.claim("default") is None  # never early
        await clock.advance(timedelta(milliseconds=1))
        claimed = await leases.claim("default")
        assert claimed is not None
        assert claimed.job_id == made.job_id


async def test_a_zero_delay_is_due_at_once(db_url: str) -> None:
    clock = ManualClock()
    async with open_queue(db_url, make_registry(), clock=clock) as queue:
        made = await queue.enqueue(Add(1), dispatch(delay=timedelta(0)))
        claimed = await Leases(queue).claim("default")
        assert claimed is not None
        assert claimed.job_id == made.job_id
