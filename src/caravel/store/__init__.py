"""The database seam. ``open_store`` picks the dialect module for a URL; everything above this
package talks to the :class:`~caravel.store.api.Store` interface only."""

from __future__ import annotations

import sqlalchemy as sa

from caravel.store import postgresql, sqlite
from caravel.store.api import Store
from caravel.store.sql import SqlStore
from caravel.store.urls import backend_of

__all__ = ["SqlStore", "Store", "open_store"]


def open_store(url: str | sa.URL, *, read_only: bool = False) -> SqlStore:
    """A store for ``url`` (``postgresql://`` or ``sqlite:///``).

    ``read_only`` opens SQLite with ``mode=ro`` and runs every PostgreSQL transaction as
    ``READ ONLY``, so the database itself refuses any write.
    """
    if backend_of(url) == "postgresql":
        return postgresql.PostgresStore(postgresql.create_engine(url), read_only=read_only)
    return sqlite.SqliteStore(sqlite.create_engine(url, read_only=read_only))
