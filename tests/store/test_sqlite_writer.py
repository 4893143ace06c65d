"""SQLite's one-job enqueue runs on the writer thread's own sqlite3 connection, outside
SQLAlchemy: it must store what the general insert stores, and a failure must leave nothing
behind and not poison the next enqueue. A claim's lease starts after any wait for the write
lock, and opening a connection is no such wait."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text

from caravel import Leases, StoreError
from caravel.store.sqlite import LOCK_WAIT_NOTED_MS
from caravel.testing import ManualClock
from tests.support import LEASE, Add, dispatch, open_queue

pytestmark = pytest.mark.parametrize("backend", ["sqlite"])

#: Every column but those that differ between two jobs by nature (with a tracer provider set,
#: as an earlier test may leave it, each enqueue has its own trace: only whether it has one).
COLUMNS = (
    "queue, job_type, tenant_id, state, attempt, max_attempts, due_at, available_at,"
    " lease_token, lease_expires_at, started_at, finished_at, created_at, updated_at,"
    " last_failure, trace_context IS NULL"
)


def _file(url: str) -> Path:
    return Path(url.removeprefix("sqlite:///"))


def _query(url: str, sql: str, *args: object) -> list[tuple[object, ...]]:
    with sqlite3.connect(_file(url)) as conn:
        return [tuple(row) for row in conn.execute(sql, args)]


def _execute(url: str, sql: str) -> None:
    conn = sqlite3.connect(_file(url))
    try:
        conn.execute(sql)
        conn.commit()
    finally:
        conn.close()


async def test_one_job_is_stored_as_the_general_insert_stores_it(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        one = await queue.enqueue(Add(1, "x"), dispatch("alone"))
        # Two jobs take the general (SQLAlchemy) path.
        pair = await queue.enqueue_many([(Add(1, "x"), dispatch("pair-1")), (Add(2), dispatch())])
        status = await queue.get_status(one.job_id, "default", "tenant-a")

    assert status is not None
    assert status.state == "ready"
    (stored_id,) = _query(db_url, "SELECT id FROM caravel_jobs WHERE idempotency_key = 'alone'")[0]
    assert stored_id == one.job_id.hex  # the column's text form, as SQLAlchemy writes it
    alone = _query(db_url, f"SELECT {COLUMNS} FROM caravel_jobs WHERE id = ?", one.job_id.hex)
    general = _query(db_url, f"SELECT {COLUMNS} FROM caravel_jobs WHERE id = ?", pair[0].job_id.hex)
    # Same clock reading is not guaranteed: compare with the times blanked out.
    times = {6, 7, 12, 13}  # due_at, available_at, created_at, updated_at
    assert [v for i, v in enumerate(alone[0]) if i not in times] == [
        v for i, v in enumerate(general[0]) if i not in times
    ]
    assert alone[0][6] == alone[0][7] == alone[0][12] == alone[0][13]
    payloads = _query(
        db_url,
        "SELECT payload FROM caravel_jobs WHERE id IN (?, ?)",
        one.job_id.hex,
        pair[0].job_id.hex,
    )
    assert payloads[0] == payloads[1]


async def test_a_repeated_key_is_answered_with_the_first_job(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        first = await queue.enqueue(Add(1), dispatch("k"))
        again = await queue.enqueue(Add(1), dispatch("k"))
    assert again.already_enqueued
    assert again.job_id == first.job_id
    assert _query(db_url, "SELECT COUNT(*) FROM caravel_jobs") == [(1,)]


async def test_a_failed_insert_writes_nothing_and_the_next_one_works(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        await queue.enqueue(Add(1), dispatch("before"))
        _execute(
            db_url,
            "CREATE TRIGGER refuse BEFORE INSERT ON caravel_jobs"
            " BEGIN SELECT RAISE(ABORT, 'refused by the test'); END",
        )
        with pytest.raises(StoreError) as caught:
            await queue.enqueue(Add(2), dispatch("refused"))
        assert caught.value.operation == "job_insert"
        assert "refused by the test" not in str(caught.value)  # driver text stays out
        _execute(db_url, "DROP TRIGGER refuse")

        after = await queue.enqueue(Add(3), dispatch("after"))

        assert not after.already_enqueued
        keys = _query(db_url, "SELECT idempotency_key FROM caravel_jobs ORDER BY created_at")
        assert sorted(k for (k,) in keys) == ["after", "before"]
        # The write lock was given back: another connection can write at once.
        conn = sqlite3.connect(_file(db_url), timeout=0)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.rollback()
        finally:
            conn.close()


async def test_opening_a_connection_does_not_delay_the_lease(db_url: str) -> None:
    clock = ManualClock()
    async with open_queue(db_url, clock=clock) as queue:
        await queue.enqueue(Add(1), dispatch())
        store: Any = queue.store.inner  # type: ignore[attr-defined]
        opening = (LOCK_WAIT_NOTED_MS + 100) / 1000

        def slow_to_open(*_: object) -> None:
            # Real time: the store times its waits for SQLite's lock on the monotonic clock.
            time.sleep(opening)

        store._blocking.dispose()  # the claim opens a connection of its own
        event.listen(store._blocking, "connect", slow_to_open)
        claimed = await Leases(queue).claim("default")
    assert claimed is not None
    assert claimed.lease.expires_at_ms == clock.now_ms() + int(LEASE.total_seconds() * 1000)


async def test_a_failed_commit_leaves_no_write_lock_held_and_the_next_write_works(
    db_url: str,
) -> None:
    """A COMMIT that fails (here a deferred foreign key; a full disk is the real-world case)
    must not give its connection back to the pool still inside ``BEGIN IMMEDIATE``: the write
    lock would stay held against every other process, and the next write on it would fail."""
    _execute(db_url, "CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    _execute(
        db_url,
        "CREATE TABLE child (id INTEGER PRIMARY KEY, parent INTEGER REFERENCES parent (id) "
        "DEFERRABLE INITIALLY DEFERRED)",
    )
    async with open_queue(db_url) as queue:
        store = queue.store.inner  # type: ignore[attr-defined]

        @event.listens_for(store._blocking, "connect")  # type: ignore[misc]
        def _foreign_keys(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.execute("PRAGMA foreign_keys = ON")

        with pytest.raises(StoreError):
            async with store._write("probe") as conn:
                await conn.execute(text("INSERT INTO child VALUES (1, 999)"))

        other = sqlite3.connect(_file(db_url), timeout=0.5)
        try:
            other.execute("BEGIN IMMEDIATE")  # "database is locked" if the lock were held
            other.execute("ROLLBACK")
        finally:
            other.close()
        await queue.enqueue(Add(1), dispatch())
        assert _query(db_url, "SELECT COUNT(*) FROM caravel_jobs") == [(1,)]
        assert _query(db_url, "SELECT COUNT(*) FROM child") == [(0,)]


async def test_an_operation_after_close_is_a_store_error(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        accepted = await queue.enqueue(Add(1), dispatch())
    with pytest.raises(StoreError, match="job_get"):
        await queue.get_status(accepted.job_id, "default", "tenant-a")
    with pytest.raises(StoreError, match="job_insert"):
        await queue.enqueue(Add(2), dispatch())
