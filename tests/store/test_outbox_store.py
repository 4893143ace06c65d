"""The outbox store's operations, called directly on real application databases (a SQLite file
and the PostgreSQL test database, each outbox under a table name of its own): what the relay's
end-to-end tests do not pin down one operation at a time, and how database errors reach it."""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from caravel import StoreError
from caravel.outbox import add_outbox
from caravel.store import open_outbox_store
from caravel.store.outbox import OutboxStore, PendingEnvelope, Undeliverable
from caravel.store.urls import async_url, sync_url
from tests.support.databases import sqlite_url

NOW = 1_000_000


def uid(n: int) -> UUID:
    return UUID(int=n)


@dataclass
class AppOutbox:
    """An outbox table in an application database, and a plain engine to arrange and read
    its rows behind the store's back."""

    url: str
    table: sa.Table
    engine: sa.Engine

    def add(self, n: int, **values: Any) -> UUID:
        row = {
            "id": uid(n),
            "queue": "default",
            "tenant_id": "tenant-a",
            "idempotency_key": None,
            "job_type": "tests.add.v1",
            "payload": f'{{"amount": {n}}}',
            "staged_at": NOW - 1000 + n,
            **values,
        }
        with self.engine.begin() as conn:
            conn.execute(sa.insert(self.table).values(row))
        return uid(n)

    def row(self, envelope_id: UUID) -> Any:
        with self.engine.connect() as conn:
            return conn.execute(sa.select(self.table).where(self.table.c.id == envelope_id)).one()

    @asynccontextmanager
    async def store(self) -> AsyncIterator[OutboxStore]:
        store = open_outbox_store(self.url, self.table.name)
        try:
            yield store
        finally:
            await store.close()


#: The fixture giving each server's shared test database.
SESSION_URLS = {"postgresql": "pg_session_url", "mariadb": "mariadb_session_url"}


@pytest.fixture(params=("sqlite", "postgresql", "mariadb"))
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AppOutbox]:
    if request.param == "sqlite":
        url = sqlite_url(tmp_path / "app.db")
    else:
        url = request.getfixturevalue(SESSION_URLS[request.param])
    metadata = sa.MetaData()
    add_outbox(metadata, name=f"outbox_{secrets.token_hex(4)}")
    (table,) = metadata.tables.values()
    engine = sa.create_engine(sync_url(url))
    metadata.create_all(engine)
    try:
        yield AppOutbox(url, table, engine)
    finally:
        metadata.drop_all(engine)
        engine.dispose()


async def test_pending_envelopes_come_oldest_staged_first_then_by_id_once_due(
    app: AppOutbox,
) -> None:
    tie_second = app.add(2, staged_at=10)
    tie_first = app.add(1, staged_at=10)
    app.add(3, staged_at=5, retry_at=NOW + 1)  # held back until after now
    due_again = app.add(4, staged_at=20, retry_at=NOW, relay_attempts=2)
    app.add(5, staged_at=1, dispatched_at=NOW - 1, queue_job_id=uid(5))
    oldest = app.add(
        6,
        staged_at=3,
        idempotency_key="k",
        due_at=NOW + 500,
        max_attempts=7,
        trace_context="00-trace",
    )
    async with app.store() as store:
        pending = await store.outbox_list_pending(NOW, 10)
        assert [e.id for e in pending] == [oldest, tie_first, tie_second, due_again]
        assert pending[0] == PendingEnvelope(
            id=oldest,
            queue="default",
            tenant_id="tenant-a",
            idempotency_key="k",
            job_type="tests.add.v1",
            payload='{"amount": 6}',
            due_at=NOW + 500,
            max_attempts=7,
            relay_attempts=0,
            trace_context="00-trace",
        )
        assert (pending[1].due_at, pending[1].max_attempts, pending[1].trace_context) == (
            None,
            None,
            None,
        )
        assert pending[3].relay_attempts == 2
        assert [e.id for e in await store.outbox_list_pending(NOW, 2)] == [oldest, tie_first]
        # Counted whether due or not; dispatched ones are not.
        assert await store.outbox_count_pending() == 5


async def test_marking_dispatched_records_the_job_only_while_pending(app: AppOutbox) -> None:
    pending = app.add(1, relay_failure="UnknownJobType", relay_attempts=1, retry_at=NOW - 5)
    already = app.add(2, dispatched_at=NOW - 7, queue_job_id=uid(20))
    async with app.store() as store:
        await store.outbox_mark_dispatched({pending: uid(10), already: uid(11)}, NOW)
        await store.outbox_mark_dispatched({}, NOW)  # nothing to record
        assert await store.outbox_count_pending() == 0
    row = app.row(pending)
    assert (row.dispatched_at, row.queue_job_id) == (NOW, uid(10))
    assert (row.relay_failure, row.retry_at) == (None, None)
    assert row.relay_attempts == 1
    row = app.row(already)
    assert (row.dispatched_at, row.queue_job_id) == (NOW - 7, uid(20))  # the first dispatch stands


async def test_an_intent_a_broker_took_is_dispatched_without_a_job(app: AppOutbox) -> None:
    published = app.add(1, relay_failure="Unroutable", relay_attempts=2, retry_at=NOW - 5)
    queued = app.add(2)
    already = app.add(3, dispatched_at=NOW - 7, queue_job_id=uid(20))
    async with app.store() as store:
        await store.outbox_mark_dispatched({published: None, queued: uid(10), already: None}, NOW)
        assert await store.outbox_count_pending() == 0
    row = app.row(published)
    assert (row.dispatched_at, row.queue_job_id, row.relay_failure, row.retry_at) == (
        NOW,
        None,
        None,
        None,
    )
    assert app.row(queued).queue_job_id == uid(10)
    row = app.row(already)
    assert (row.dispatched_at, row.queue_job_id) == (NOW - 7, uid(20))  # the first dispatch stands


async def test_marking_undeliverable_counts_the_attempt_only_while_pending(app: AppOutbox) -> None:
    stuck = app.add(1)
    dispatched = app.add(2, dispatched_at=NOW - 7, queue_job_id=uid(20))
    async with app.store() as store:
        await store.outbox_mark_undeliverable(
            [
                Undeliverable(stuck, "UnknownJobType", NOW + 60_000),
                Undeliverable(dispatched, "X", 1),
            ]
        )
        await store.outbox_mark_undeliverable([Undeliverable(stuck, "InvalidPayload", NOW + 1)])
        await store.outbox_mark_undeliverable([])  # nothing to record
        assert await store.outbox_list_pending(NOW, 10) == []  # held back until its retry time
        assert [e.id for e in await store.outbox_list_pending(NOW + 1, 10)] == [stuck]
    row = app.row(stuck)
    assert (row.relay_failure, row.relay_attempts, row.retry_at) == ("InvalidPayload", 2, NOW + 1)
    assert row.dispatched_at is None
    row = app.row(dispatched)
    assert (row.relay_failure, row.relay_attempts, row.retry_at) == (None, 0, None)


OPERATIONS: list[tuple[str, Callable[[OutboxStore], Awaitable[object]]]] = [
    ("outbox_read", lambda store: store.outbox_list_pending(NOW, 10)),
    ("outbox_read", lambda store: store.outbox_count_pending()),
    ("outbox_mark", lambda store: store.outbox_mark_dispatched({uid(1): uid(2)}, NOW)),
    ("outbox_mark", lambda store: store.outbox_mark_undeliverable([Undeliverable(uid(1), "X", 1)])),
]


@pytest.mark.parametrize(
    ("operation", "call"),
    OPERATIONS,
    ids=["list_pending", "count_pending", "mark_dispatched", "mark_undeliverable"],
)
async def test_a_missing_outbox_table_is_a_store_error_naming_the_operation(
    app: AppOutbox, operation: str, call: Callable[[OutboxStore], Awaitable[object]]
) -> None:
    store = open_outbox_store(app.url, "no_such_outbox")
    try:
        with pytest.raises(StoreError) as caught:
            await call(store)
    finally:
        await store.close()
    # A StoreError, not SchemaNotReadyError: the application's migrations create this table,
    # and `caravel db upgrade` would not help.
    assert type(caught.value) is StoreError
    assert caught.value.operation == operation
    assert str(caught.value).startswith(f"database error during {operation}: ")
    assert "no_such_outbox" in str(caught.value)  # the driver's reason, about the schema
    assert isinstance(caught.value.__cause__, sa.exc.SQLAlchemyError)
    assert "no_such_outbox" in str(caught.value.__cause__)


async def test_the_applications_engine_stays_open_when_the_store_closes(app: AppOutbox) -> None:
    app.add(1)
    engine = create_async_engine(async_url(app.url))
    try:
        store = open_outbox_store(engine, app.table.name)
        assert store.engine is engine
        assert await store.outbox_count_pending() == 1
        await store.close()
        async with engine.connect() as conn:
            assert await conn.scalar(sa.select(sa.func.count()).select_from(app.table)) == 1
    finally:
        await engine.dispose()


async def test_a_sqlite_application_keeps_its_journal_mode(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    metadata = sa.MetaData()
    add_outbox(metadata)
    engine = sa.create_engine(sync_url(sqlite_url(path)))
    metadata.create_all(engine)
    engine.dispose()
    store = open_outbox_store(sqlite_url(path), "caravel_outbox")
    try:
        await store.outbox_mark_undeliverable([Undeliverable(uid(1), "X", 1)])
        assert await store.outbox_count_pending() == 0
    finally:
        await store.close()
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
