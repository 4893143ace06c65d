"""``session=`` on a database of the other kind (a SQLite queue handed a PostgreSQL session, or
the reverse) is refused with ``ValidationError`` on ``session`` before a statement reaches the
caller's connection: the caller's transaction is not aborted, keeps what it wrote, and commits
its own rows. Blocking and async sessions, and DB-API connections."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from caravel import DatabaseQueue, SyncQueue, ValidationError
from caravel.store.protocol import JobFilter
from caravel.store.urls import async_url, sync_url
from tests.support import Add, dispatch, make_registry, open_queue
from tests.support.databases import SqliteTemplate

pytestmark = pytest.mark.postgres

NOTES = sa.table("app_other_kind", sa.column("body", sa.Text))
COUNT = sa.select(sa.func.count()).select_from(NOTES)


@pytest.fixture(params=["sqlite-queue", "postgresql-queue"])
def urls(
    request: pytest.FixtureRequest,
    pg_url: str,
    sqlite_template: SqliteTemplate,
    tmp_path: Path,
) -> tuple[str, str]:
    """The queue's database and the caller's, one of each kind; the caller's has an empty
    table of its own."""
    if request.param == "sqlite-queue":
        queue_url, app_url = sqlite_template.copy_to(tmp_path / "queue.db"), pg_url
    else:
        queue_url, app_url = pg_url, f"sqlite:///{tmp_path / 'app.db'}"
    engine = sa.create_engine(sync_url(app_url))
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE IF NOT EXISTS app_other_kind (body TEXT)"))
        conn.execute(sa.text("DELETE FROM app_other_kind"))
    engine.dispose()
    return queue_url, app_url


def recorded(engine: sa.Engine) -> list[str]:
    """Every statement ``engine``'s connections send from now on."""
    sent: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        sent.append(statement)

    sa.event.listen(engine, "before_cursor_execute", record)
    return sent


def committed(app_url: str) -> list[str]:
    engine = sa.create_engine(sync_url(app_url))
    try:
        with engine.connect() as conn:
            return sorted(conn.execute(sa.select(NOTES.c.body)).scalars())
    finally:
        engine.dispose()


def refused(call: Callable[[], object]) -> None:
    with pytest.raises(ValidationError) as raised:
        call()
    assert raised.value.field == "session"
    assert "queue's database" in raised.value.rule


async def no_jobs(queue: DatabaseQueue) -> bool:
    return not await queue.store.job_list(JobFilter(limit=10))


def test_a_session_of_the_other_kind_is_refused_untouched(urls: tuple[str, str]) -> None:
    queue_url, app_url = urls
    engine = sa.create_engine(sync_url(app_url))
    sent = recorded(engine)
    try:
        with SyncQueue(queue_url, make_registry()) as queue, Session(engine) as session:
            session.execute(NOTES.insert().values(body="before"))
            before = len(sent)
            refused(lambda: queue.enqueue(Add(1), dispatch(), session=session))
            refused(lambda: queue.enqueue_many([(Add(2), dispatch())], session=session))
            assert sent[before:] == []
            session.execute(NOTES.insert().values(body="after"))
            assert session.execute(COUNT).scalar() == 2
            session.commit()
            assert queue.call(no_jobs, queue.queue)
    finally:
        engine.dispose()
    assert committed(app_url) == ["after", "before"]


async def test_an_async_session_of_the_other_kind_is_refused_untouched(
    urls: tuple[str, str],
) -> None:
    queue_url, app_url = urls
    engine = create_async_engine(async_url(app_url))
    sent = recorded(engine.sync_engine)
    try:
        async with open_queue(queue_url) as queue, AsyncSession(engine) as session:
            await session.execute(NOTES.insert().values(body="before"))
            before = len(sent)
            with pytest.raises(ValidationError) as raised:
                await queue.enqueue(Add(1), dispatch(), session=session)
            assert raised.value.field == "session"
            assert sent[before:] == []
            await session.execute(NOTES.insert().values(body="after"))
            assert (await session.execute(COUNT)).scalar() == 2
            await session.commit()
            assert await no_jobs(queue)
    finally:
        await engine.dispose()
    assert committed(app_url) == ["after", "before"]


@pytest.fixture
def raw(urls: tuple[str, str]) -> Iterator[Any]:
    """A DB-API connection (sqlite3 or psycopg) on the caller's database."""
    app_url = urls[1]
    if app_url.startswith("sqlite"):
        conn: Any = sqlite3.connect(sa.make_url(app_url).database or "")
    else:
        conn = psycopg.connect(app_url)
    try:
        yield conn
    finally:
        conn.close()


def test_a_dbapi_connection_of_the_other_kind_is_refused_untouched(
    urls: tuple[str, str], raw: Any
) -> None:
    queue_url, app_url = urls
    sent: list[str] = []
    if isinstance(raw, sqlite3.Connection):
        raw.set_trace_callback(sent.append)
    with SyncQueue(queue_url, make_registry()) as queue:
        raw.execute("INSERT INTO app_other_kind (body) VALUES ('before')")
        before = len(sent)
        refused(lambda: queue.enqueue(Add(1), dispatch(), session=raw))
        assert sent[before:] == []
        if isinstance(raw, psycopg.Connection):  # not aborted by a failed statement
            assert raw.info.transaction_status is psycopg.pq.TransactionStatus.INTRANS
        raw.execute("INSERT INTO app_other_kind (body) VALUES ('after')")
        raw.commit()
        assert queue.call(no_jobs, queue.queue)
    assert committed(app_url) == ["after", "before"]
