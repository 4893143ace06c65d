"""The database seam. :func:`open_store` and :func:`open_reader` pick the dialect module for a URL
and wrap its store in the instrumented store; everything above this package talks to the
:class:`~caravel.store.protocol.Store` (or :class:`~caravel.store.protocol.ReadStore`) protocol
only. A dialect module (and its driver) is imported when the first URL of its kind is opened."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from caravel.store.urls import backend_of

if TYPE_CHECKING:
    import sqlalchemy as sa

    from caravel.store.base import SqlStore
    from caravel.store.instrumented import InstrumentedStore
    from caravel.store.protocol import ReadStore

__all__ = ["open_reader", "open_store"]


def _dialect_store(url: str | sa.URL, *, read_only: bool) -> SqlStore[Any]:
    if backend_of(url) == "postgresql":
        from caravel.store import postgresql

        return postgresql.PostgresStore(postgresql.create_engine(url, read_only=read_only))
    from caravel.store import sqlite

    return sqlite.SqliteStore(sqlite.create_engine(url, read_only=read_only))


def open_store(url: str | sa.URL) -> InstrumentedStore:
    """The store for ``url`` (``postgresql://`` or ``sqlite:///``), instrumented."""
    from caravel.store.instrumented import InstrumentedStore

    return InstrumentedStore(_dialect_store(url, read_only=False))


def open_reader(url: str | sa.URL) -> ReadStore:
    """A store for ``url`` that offers only reads, on connections the database itself keeps
    read-only: SQLite opened with ``mode=ro``, PostgreSQL sessions with
    ``default_transaction_read_only``."""
    from caravel.store.instrumented import InstrumentedStore

    return InstrumentedStore(_dialect_store(url, read_only=True))
