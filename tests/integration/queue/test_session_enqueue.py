"""Enqueue inside the caller's own transaction (``session=``), on every database and every kind
of connection: the job exists exactly when the caller's transaction commits."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from caravel import IdempotencyConflictError, JobState, SyncQueue, ValidationError
from caravel.store.schema import metadata
from caravel.store.urls import async_url, sync_url
from tests.support import Add, dispatch, make_registry, open_queue
from tests.support.databases import (
    create_database_like,
    dbapi_connection,
    drop_database,
    truncate_pg,
)

NOTES = sa.table("app_notes", sa.column("body", sa.Text))


@pytest.fixture
def engine(db_url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(sync_url(db_url))
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE IF NOT EXISTS app_notes (body TEXT)"))
        conn.execute(sa.text("DELETE FROM app_notes"))
    yield engine
    engine.dispose()


@pytest.fixture
def queue(db_url: str) -> Iterator[SyncQueue]:
    with SyncQueue(db_url, make_registry()) as queue:
        yield queue


def _state(queue: SyncQueue, job_id: Any) -> JobState | None:
    status = queue.get_status(job_id, "default", "tenant-a")
    return None if status is None else status.state


def test_the_job_exists_when_the_session_commits(engine: sa.Engine, queue: SyncQueue) -> None:
    with Session(engine) as session:
        session.execute(NOTES.insert().values(body="hello"))
        result = queue.enqueue(Add(1), dispatch("k1"), session=session)
        assert result.already_enqueued is False
        assert _state(queue, result.job_id) is None  # not before the commit
        assert queue.queue.wakeups.event("default").is_set() is False
        session.commit()
    assert _state(queue, result.job_id) is JobState.READY
    # In-process workers are woken by the commit (the hub is set on the queue's own loop).
    assert queue.call(_woken, queue, "default") is True


async def _woken(queue: SyncQueue, name: str) -> bool:
    return await queue.queue.wakeups.wait(name, 5.0)


def test_a_rollback_leaves_no_job_and_no_wakeup(engine: sa.Engine, queue: SyncQueue) -> None:
    with Session(engine) as session:
        session.execute(NOTES.insert().values(body="hello"))
        result = queue.enqueue(Add(1), dispatch("k1"), session=session)
        session.rollback()
    assert _state(queue, result.job_id) is None
    assert queue.queue.wakeups.event("default").is_set() is False
    # The key was never used: a later enqueue under it makes a new job.
    assert queue.enqueue(Add(2), dispatch("k1")).already_enqueued is False
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(NOTES)).scalar() == 0


def test_idempotency_and_conflicts_in_the_callers_transaction(
    engine: sa.Engine, queue: SyncQueue
) -> None:
    original = queue.enqueue(Add(1), dispatch("k1"))
    with Session(engine) as session:
        again = queue.enqueue(Add(1), dispatch("k1"), session=session)
        assert (again.job_id, again.already_enqueued) == (original.job_id, True)
        with pytest.raises(IdempotencyConflictError) as caught:
            queue.enqueue(Add(2), dispatch("k1"), session=session)
        assert caught.value.job_id == original.job_id
        # The conflict ran no failing statement: the caller's transaction is still usable.
        session.execute(NOTES.insert().values(body="kept"))
        second = queue.enqueue_many(
            [(Add(3), dispatch("k3")), (Add(3), dispatch("k3"))], session=session
        )
        assert [r.already_enqueued for r in second] == [False, True]
        session.commit()
    assert _state(queue, second[0].job_id) is JobState.READY


def test_a_bad_job_touches_nothing(engine: sa.Engine, queue: SyncQueue) -> None:
    with Session(engine) as session:
        with pytest.raises(ValidationError) as caught:
            queue.enqueue(Add(1), dispatch(queue="bad queue!"), session=session)
        assert caught.value.field == "queue"
        assert session.in_transaction() is False  # not a statement was sent


def test_a_core_connection_and_a_dbapi_connection(
    db_url: str, engine: sa.Engine, queue: SyncQueue
) -> None:
    with engine.connect() as conn:
        core = queue.enqueue(Add(1), dispatch(), session=conn)
        conn.commit()
    assert _state(queue, core.job_id) is JobState.READY
    raw: Any = dbapi_connection(db_url)
    try:
        kept = queue.enqueue(Add(2), dispatch("raw"), session=raw)
        repeat = queue.enqueue(Add(2), dispatch("raw"), session=raw)
        assert (repeat.job_id, repeat.already_enqueued) == (kept.job_id, True)
        raw.commit()
        dropped = queue.enqueue(Add(3), dispatch(), session=raw)
        raw.rollback()
    finally:
        raw.close()
    assert _state(queue, kept.job_id) is JobState.READY
    assert _state(queue, dropped.job_id) is None


def test_a_session_on_another_database_is_refused(
    db_url: str, queue: SyncQueue, tmp_path: Any
) -> None:
    other = create_database_like(db_url, tmp_path)
    other_engine = sa.create_engine(sync_url(other))
    try:
        with Session(other_engine) as session:
            with pytest.raises(ValidationError) as caught:
                queue.enqueue(Add(1), dispatch(), session=session)
            assert caught.value.field == "session"
            assert "outbox" in caught.value.rule
    finally:
        other_engine.dispose()
        drop_database(other)


def test_not_a_session_is_refused(queue: SyncQueue) -> None:
    with pytest.raises(ValidationError, match="must be a SQLAlchemy Session"):
        queue.enqueue(Add(1), dispatch(), session=object())


async def test_async_session_and_async_queue(db_url: str) -> None:
    engine = create_async_engine(async_url(db_url))
    try:
        async with open_queue(db_url) as queue:
            woken = queue.wakeups.event("default")
            async with AsyncSession(engine) as session:
                result = await queue.enqueue(Add(1), dispatch("a"), session=session)
                assert woken.is_set() is False
                assert await queue.get_status(result.job_id, "default", "tenant-a") is None
                await session.commit()
            status = await queue.get_status(result.job_id, "default", "tenant-a")
            assert status is not None
            assert status.state is JobState.READY
            assert woken.is_set() is True
            async with AsyncSession(engine) as session:
                dropped = await queue.enqueue_many([(Add(2), dispatch())], session=session)
                await session.rollback()
            assert await queue.get_status(dropped[0].job_id, "default", "tenant-a") is None
    finally:
        await engine.dispose()


@pytest.mark.postgres
async def test_async_psycopg_connection_and_notify_at_commit(pg_session_url: str) -> None:
    truncate_pg(pg_session_url, tuple(metadata.tables))
    listener = await psycopg.AsyncConnection.connect(pg_session_url, autocommit=True)
    try:
        await listener.execute("LISTEN caravel_jobs")
        async with open_queue(pg_session_url) as queue:
            async with await psycopg.AsyncConnection.connect(pg_session_url) as conn:
                result = await queue.enqueue(Add(1), dispatch(), session=conn)
                assert await _notified(listener, 0.3) == []  # nothing before the commit
                await conn.commit()
            assert await _notified(listener, 10.0) == ["default"]
            status = await queue.get_status(result.job_id, "default", "tenant-a")
            assert status is not None
    finally:
        await listener.close()


async def _notified(listener: psycopg.AsyncConnection[Any], seconds: float) -> list[str]:
    return [n.payload async for n in listener.notifies(timeout=seconds, stop_after=1)]


def test_a_memory_queue_refuses_a_session() -> None:
    with (
        SyncQueue("memory://", make_registry()) as queue,
        pytest.raises(ValidationError, match="memory://"),
    ):
        queue.enqueue(Add(1), dispatch(), session=object())
