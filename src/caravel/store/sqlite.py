"""SQLite: one writer at a time. Every write transaction starts with ``BEGIN IMMEDIATE`` so it takes
the write lock up front (no deadlock between two readers upgrading), the file runs in WAL mode so
readers never block the writer, and a busy timeout makes competing processes wait instead of
failing. Within one process an asyncio lock keeps our own connections from queueing on SQLite's
lock at all."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from caravel.store.schema import jobs
from caravel.store.sql import LOCK_WAIT_KEY, SqlStore
from caravel.store.urls import async_url

__all__ = ["SqliteStore", "create_engine", "read_only_url"]

BUSY_TIMEOUT_MS = 30_000
LOCK_WAIT_NOTED_MS = 50
_READONLY_OPTION = "caravel_readonly"


def _file_url(url: str | sa.URL, mode: str) -> sa.URL:
    parsed = async_url(url)
    path = parsed.database or ""
    if not path or path == ":memory:" or path.startswith("file:"):
        return parsed
    return parsed.set(database=f"file:{path}", query={**parsed.query, "mode": mode, "uri": "true"})


def read_only_url(url: str | sa.URL) -> sa.URL:
    """The URL that opens the same file with ``mode=ro``: SQLite itself refuses every write."""
    return _file_url(url, "ro")


def create_engine(
    url: str | sa.URL, *, read_only: bool = False, set_wal: bool = True
) -> AsyncEngine:
    """An async engine for a SQLite file, set up for WAL, busy waits and ``BEGIN IMMEDIATE``.

    The file is opened with ``mode=rw`` (or ``mode=ro``): the queue never creates a database, so
    a wrong or removed path fails loudly instead of silently starting an empty one. With
    ``set_wal=False`` the file keeps whatever journal mode its owner chose (the outbox relay
    reads the application's database and leaves that choice to the application).
    """
    target = _file_url(url, "ro" if read_only else "rw")
    # No rollback when a connection goes back to the pool: every use goes through a SQLAlchemy
    # transaction that commits or rolls back itself (also when cancelled), and through aiosqlite
    # each call is a round trip to the connection's thread.
    engine = create_async_engine(target, pool_size=5, max_overflow=5, pool_reset_on_return=None)

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event, below, issue BEGIN itself.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if not read_only and set_wal:
            # Switching to WAL needs the file to itself; once it is in WAL (the usual case after
            # the first connection) there is nothing to switch, so do not contend for it.
            cursor.execute("PRAGMA journal_mode")
            mode = cursor.fetchone()
            if mode is None or str(mode[0]).lower() != "wal":
                cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = FULL")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        if read_only or conn.get_execution_options().get(_READONLY_OPTION):
            conn.exec_driver_sql("BEGIN")
        else:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


class SqliteStore(SqlStore):
    db_system = "sqlite"
    insert_chunk = 200

    def __init__(self, engine: AsyncEngine) -> None:
        super().__init__(engine)
        self._writer = asyncio.Lock()

    def _insert(self) -> Any:
        return sqlite.insert(jobs)

    async def schema_revision(self) -> str | None:
        # A missing file is an unmigrated queue, not a broken connection: say so.
        path = self.engine.url.database or ""
        path = path.removeprefix("file:")
        if path and path != ":memory:" and not await asyncio.to_thread(os.path.exists, path):
            return None
        return await super().schema_revision()

    def _is_schema_missing(self, exc: BaseException) -> bool:
        text = str(getattr(exc, "orig", exc))
        return "no such table" in text or "no such column" in text

    @asynccontextmanager
    async def _transaction(
        self, *, readonly: bool, durable: bool = True, single: bool = False
    ) -> AsyncIterator[AsyncConnection]:
        if readonly:
            async with self.engine.connect() as conn:
                await conn.execution_options(**{_READONLY_OPTION: True})
                async with conn.begin():
                    yield conn
            return
        asked = time.monotonic()
        async with self._writer, self.engine.begin() as conn:
            # The caller read its clock before waiting for the write lock. A long wait (another
            # process writing) is recorded so a claim can start its lease when it really holds
            # the job, not in the past; waits under LOCK_WAIT_NOTED_MS are scheduling noise.
            # (``info`` outlives this checkout: the note is set or cleared every time.)
            waited_ms = int((time.monotonic() - asked) * 1000)
            if waited_ms >= LOCK_WAIT_NOTED_MS:
                conn.info[LOCK_WAIT_KEY] = waited_ms
            else:
                conn.info.pop(LOCK_WAIT_KEY, None)
            yield conn
