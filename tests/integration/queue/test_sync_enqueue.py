"""The sync facade's one-job enqueue, which runs on the caller's thread (the store's
``job_insert_blocking``): the workers it wakes, in this process and through PostgreSQL's NOTIFY,
and the deadline that bounds it as it bounds every operation on the queue's own loop."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy.engine import make_url

from caravel import QueueWorker, StoreError, SyncQueue
from caravel.store.postgresql.notifications import CHANNEL
from tests.support import Add, Recorder, dispatch, make_registry


@pytest.fixture
def sync_queue(db_url: str) -> Iterator[SyncQueue]:
    with SyncQueue(db_url, make_registry()) as queue:
        yield queue


def _dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def test_an_enqueue_wakes_the_workers_waiting_in_this_process(sync_queue: SyncQueue) -> None:
    hub = sync_queue.queue.wakeups

    async def watch() -> None:
        hub.event("other")  # a queue nobody enqueues to stays quiet
        hub.event("default").clear()

    sync_queue.call(watch)
    waiting = asyncio.run_coroutine_threadsafe(hub.wait("default", 30), sync_queue._loop.loop)

    sync_queue.enqueue(Add(1), dispatch())

    assert waiting.result(timeout=30) is True
    assert not hub.event("other").is_set()


def test_a_repeat_wakes_nobody(sync_queue: SyncQueue) -> None:
    sync_queue.enqueue(Add(1), dispatch("k1"))
    hub = sync_queue.queue.wakeups

    async def watch() -> None:
        hub.event("default").clear()

    sync_queue.call(watch)
    assert sync_queue.enqueue(Add(1), dispatch("k1")).already_enqueued
    sync_queue.call(asyncio.sleep, 0)  # whatever the enqueue handed the loop has run
    assert not hub.event("default").is_set()


def test_threads_enqueue_while_the_queues_own_loop_works_it(db_url: str) -> None:
    """Callers' threads insert on their own connections while the queue's loop claims and
    acknowledges on the store's: on SQLite they take turns on the file's write lock with the
    store's writer thread, and nothing waits for ever."""
    recorder = Recorder()
    with SyncQueue(db_url, make_registry(recorder)) as queue:
        worker = QueueWorker(queue.queue)
        errors: list[BaseException] = []

        def produce(thread: int) -> None:
            try:
                for n in range(20):
                    queue.enqueue(Add(n), dispatch(f"{thread}-{n}"))
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=produce, args=(t,)) for t in range(3)]
        for thread in threads:
            thread.start()
        producing = True
        while producing:
            producing = any(thread.is_alive() for thread in threads)
            while queue.call(worker.run_once, "default"):
                pass  # claims and acknowledgements on the loop, between the callers' inserts
        for thread in threads:
            thread.join()
        queue.call(worker.close)
    assert errors == []
    assert len(recorder.runs) == 60


@pytest.mark.postgres
def test_threads_beyond_the_blocking_connections_go_through_the_loops_pool(pg_url: str) -> None:
    """At most as many blocking connections are open as the engine's pool would open (here
    cut to one): the callers beyond them are inserted on the loop, and every job lands once."""
    with SyncQueue(pg_url, make_registry()) as queue:
        store = queue.queue.store.inner
        store._blocking._limit = 1
        start = threading.Barrier(4)
        results: list[object] = []

        def produce(thread: int) -> None:
            start.wait()
            results.extend(queue.enqueue(Add(n), dispatch(f"k{n}")).job_id for n in range(10))

        threads = [threading.Thread(target=produce, args=(t,)) for t in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert store._blocking._opened <= 1
    assert len(results) == 40
    assert len(set(results)) == 10


@pytest.mark.postgres
def test_enqueues_within_the_cooldown_share_one_trailing_notify(pg_url: str) -> None:
    """As on the async queue: the first enqueue after a quiet cooldown carries the NOTIFY, the
    ones right behind it none, and one trailing NOTIFY follows a cooldown after the last commit
    (armed on the queue's loop by the caller's thread)."""
    with (
        psycopg.connect(_dsn(pg_url), autocommit=True) as listener,
        SyncQueue(pg_url, make_registry()) as queue,
    ):
        listener.execute(f"LISTEN {CHANNEL}")
        queue.queue.store.inner._announcer.cooldown = 1.5
        started = time.monotonic()
        for n in range(3):
            queue.enqueue(Add(n), dispatch())
        last_returned = time.monotonic()
        assert last_returned - started < 1.5
        heard = [
            (note.payload, time.monotonic()) for note in listener.notifies(timeout=30, stop_after=2)
        ]
        assert [payload for payload, _ in heard] == ["default", "default"]
        assert heard[0][1] - last_returned < 1.4  # the leading enqueue's own NOTIFY
        assert heard[1][1] - last_returned >= 1.4  # and one trailing NOTIFY, not one per enqueue


@pytest.mark.postgres
def test_an_enqueue_stuck_past_the_deadline_is_cut(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A statement that never returns (here: waiting on a lock another session holds) fails
    with a StoreError once the store's deadline has passed: its connection is cut by the
    queue's loop, not left to the server's 30 s statement timeout. The next enqueue works."""
    with SyncQueue(pg_url, make_registry()) as queue:
        queue.enqueue(Add(0), dispatch())  # a steady stream of deadlines of the default length
        store = queue.queue.store.inner
        store.operation_timeout = 0.5
        with psycopg.connect(_dsn(pg_url)) as holder:
            holder.execute("LOCK TABLE caravel_jobs IN ACCESS EXCLUSIVE MODE")
            with (
                caplog.at_level(logging.WARNING, "caravel.store"),
                pytest.raises(StoreError) as caught,
            ):
                queue.enqueue(Add(1), dispatch())
            holder.rollback()
        assert not isinstance(caught.value.__cause__, psycopg.errors.QueryCanceled)
        assert "exceeded its deadline" in caplog.text
        store.operation_timeout = 45.0
        assert queue.enqueue(Add(2), dispatch()).already_enqueued is False
