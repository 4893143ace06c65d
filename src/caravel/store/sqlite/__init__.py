"""SQLite: one writer at a time. Every write transaction starts with ``BEGIN IMMEDIATE`` so it takes
the write lock up front (no deadlock between two readers upgrading), the file runs in WAL mode so
readers never block the writer, and a busy timeout makes competing processes wait instead of
failing. Within one process an asyncio lock keeps our own connections from queueing on SQLite's
lock at all."""

from __future__ import annotations

from caravel.store.sqlite.connections import (
    BUSY_TIMEOUT_MS,
    LOCK_WAIT_NOTED_MS,
    create_engine,
    read_only_url,
)
from caravel.store.sqlite.store import SqliteStore

__all__ = [
    "BUSY_TIMEOUT_MS",
    "LOCK_WAIT_NOTED_MS",
    "SqliteStore",
    "create_engine",
    "read_only_url",
]
