"""PostgreSQL: claims lock their rows with ``FOR UPDATE SKIP LOCKED`` so competing workers never
wait on each other, and duplicate submissions are settled by ``ON CONFLICT DO NOTHING``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from caravel.store.schema import jobs
from caravel.store.sql import SqlStore
from caravel.store.urls import async_url

__all__ = ["PostgresStore", "create_engine"]

_SCHEMA_MISSING = {"42P01", "42703"}  # undefined_table, undefined_column


def create_engine(url: str | sa.URL, *, pool_size: int = 5) -> AsyncEngine:
    """An async engine for a PostgreSQL URL, through psycopg 3."""
    return create_async_engine(
        async_url(url), pool_size=pool_size, max_overflow=10, pool_pre_ping=False
    )


class PostgresStore(SqlStore):
    supports_listen_notify = False
    insert_chunk = 1000

    def __init__(self, engine: AsyncEngine, *, read_only: bool = False) -> None:
        super().__init__(engine)
        self._read_only = read_only

    def _insert(self) -> Any:
        return postgresql.insert(jobs)

    def _lock_claim_candidates(self, candidates: sa.Select[Any]) -> sa.Select[Any]:
        return candidates.with_for_update(skip_locked=True)

    def _is_schema_missing(self, exc: BaseException) -> bool:
        orig = getattr(exc, "orig", None)
        return getattr(orig, "sqlstate", None) in _SCHEMA_MISSING

    @asynccontextmanager
    async def _transaction(self, *, readonly: bool) -> AsyncIterator[AsyncConnection]:
        async with self.engine.begin() as conn:
            if self._read_only:
                await conn.exec_driver_sql("SET TRANSACTION READ ONLY")
            yield conn
