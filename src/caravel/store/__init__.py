"""The database seam. :func:`open_store` and :func:`open_reader` pick the dialect module for a URL
and wrap its store in the instrumented store; everything above this package talks to the
:class:`~caravel.store.protocol.Store` (or :class:`~caravel.store.protocol.ReadStore`) protocol
only. :func:`open_outbox_store` opens the outbox relay's store on the application's database.
``memory://`` URLs open the in-process store of :mod:`caravel.store.memory`.
SQLAlchemy, a dialect module and its driver are imported when the first URL of their kind is
opened, so the row types in :mod:`~caravel.store.protocol` cost nothing to import."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sqlalchemy as sa
    from sqlalchemy.ext.asyncio import AsyncEngine

    from caravel.store.base import SqlStore
    from caravel.store.instrumented import InstrumentedStore
    from caravel.store.outbox import OutboxStore
    from caravel.store.protocol import ReadStore, Store

__all__ = ["open_outbox_store", "open_reader", "open_store"]


def _dialect_store(url: str | sa.URL, *, read_only: bool) -> SqlStore[Any]:
    from caravel.store.urls import backend_of

    backend = backend_of(url)
    if backend == "postgresql":
        from caravel.store import postgresql

        return postgresql.PostgresStore(postgresql.create_engine(url, read_only=read_only))
    if backend == "mariadb":
        from caravel.store import mariadb

        return mariadb.MariadbStore(mariadb.create_engine(url, read_only=read_only))
    from caravel.store import sqlite

    return sqlite.SqliteStore(sqlite.create_engine(url, read_only=read_only))


def _is_memory(url: str | sa.URL) -> bool:
    from caravel.store.urls import backend_of

    return backend_of(url) == "memory"


def _is_url(target: object) -> bool:
    if isinstance(target, str):
        return True
    from sqlalchemy.engine import URL

    return isinstance(target, URL)


def open_store(target: str | sa.URL | Store) -> InstrumentedStore:
    """The store for a URL (``postgresql://``, ``mariadb://``, ``sqlite:///`` or ``memory://``),
    instrumented;
    an already opened store is instrumented (once) and used as it is."""
    from caravel.store.instrumented import InstrumentedStore, instrumented

    if _is_url(target):
        url: str | sa.URL = target  # type: ignore[assignment]
        if _is_memory(url):
            from caravel.store import memory

            return InstrumentedStore(memory.open_store(url))
        return InstrumentedStore(_dialect_store(url, read_only=False))
    return instrumented(target)  # type: ignore[arg-type]


def open_reader(target: str | sa.URL | ReadStore) -> ReadStore:
    """A store for a URL that offers only reads, on connections the database itself keeps
    read-only: SQLite opened with ``mode=ro``, PostgreSQL sessions with
    ``default_transaction_read_only``; for ``memory://`` a reader that has no write operation
    at all. An already opened store is used as it is."""
    from caravel.store.instrumented import InstrumentedStore

    if _is_url(target):
        url: str | sa.URL = target  # type: ignore[assignment]
        if _is_memory(url):
            from caravel.store import memory

            # Instrumented like every reader; only its read operations are ever called.
            return InstrumentedStore(memory.open_reader(url))  # type: ignore[arg-type]
        return InstrumentedStore(_dialect_store(url, read_only=True))
    return target  # type: ignore[return-value]


def open_outbox_store(app: AsyncEngine | str | sa.URL, table_name: str) -> OutboxStore:
    """The outbox store for the table ``table_name`` in the application's database: over
    ``app`` itself when it is the application's engine (closing the store leaves it open), or
    over an engine of the store's own for a URL. A SQLite file keeps the journal mode its
    application chose."""
    from sqlalchemy.ext.asyncio import AsyncEngine

    from caravel.store.outbox import OutboxStore
    from caravel.store.urls import backend_of

    if isinstance(app, AsyncEngine):
        return OutboxStore(app, table_name, owns_engine=False)
    backend = backend_of(app)
    if backend == "memory":
        from caravel.errors import ValidationError

        raise ValidationError(
            "url",
            "the outbox lives in the application's own database: use its postgresql://, "
            "mariadb:// or sqlite:// URL, not memory://",
        )
    if backend == "postgresql":
        from caravel.store import postgresql

        return OutboxStore(postgresql.create_engine(app), table_name, owns_engine=True)
    if backend == "mariadb":
        from caravel.store import mariadb

        return OutboxStore(mariadb.create_engine(app), table_name, owns_engine=True)
    from caravel.store import sqlite

    engine = sqlite.create_engine(app, set_wal=False)
    return OutboxStore(engine, table_name, owns_engine=True)
