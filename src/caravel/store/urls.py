"""Database URLs: what a user writes, and what SQLAlchemy needs for each driver.

Users write ``postgresql://...`` or ``sqlite:///path/to/queue.db`` (any explicit driver suffix is
accepted too), or ``memory://`` / ``memory://NAME`` for the in-process store
(:mod:`caravel.store.memory`), which has no driver and no migrations. The library talks to
PostgreSQL through psycopg 3 and to SQLite through the standard ``sqlite3`` module (on the
store's own threads, and for migrations) or aiosqlite (the async engine
:func:`caravel.store.sqlite.create_engine` returns).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from caravel.errors import ValidationError

__all__ = ["Address", "Backend", "address", "async_url", "backend_of", "sync_url"]

Backend = Literal["postgresql", "sqlite", "memory"]


def _parse(url: str | URL) -> URL:
    if isinstance(url, URL):
        return url
    try:
        return make_url(url)
    except ArgumentError:
        raise ValidationError("url", "must be a database URL such as sqlite:///queue.db") from None


def backend_of(url: str | URL) -> Backend:
    """Which database a URL names; anything but PostgreSQL, SQLite and the in-memory store is
    rejected, and so is a SQLite URL with a host (``sqlite://queue.db``: one slash too few)."""
    parsed = _parse(url)
    name = parsed.get_backend_name()
    if name in ("postgresql", "postgres"):
        return "postgresql"
    if name == "sqlite":
        if parsed.host:
            raise ValidationError(
                "url",
                "a SQLite URL takes three slashes before a relative path (sqlite:///queue.db) "
                "and four before an absolute one (sqlite:////var/lib/queue.db)",
            )
        return "sqlite"
    if name == "memory":
        return "memory"
    raise ValidationError("url", "must name a postgresql://, sqlite:// or memory:// database")


def _sql_backend(parsed: URL) -> Backend:
    """The SQL database a URL names: the in-memory store has no driver to name, and its schema
    is always current, so asking for one (to migrate it, say) is a usage error."""
    backend = backend_of(parsed)
    if backend == "memory":
        raise ValidationError(
            "url",
            "a memory:// store lives inside one process and needs no migrations; "
            "use a postgresql:// or sqlite:// database here",
        )
    return backend


def async_url(url: str | URL) -> URL:
    """The URL with the async driver Caravel uses for its backend."""
    parsed = _parse(url)
    driver = "postgresql+psycopg" if _sql_backend(parsed) == "postgresql" else "sqlite+aiosqlite"
    return parsed.set(drivername=driver)


def sync_url(url: str | URL) -> URL:
    """The URL with the synchronous driver (used by migrations)."""
    parsed = _parse(url)
    driver = "postgresql+psycopg" if _sql_backend(parsed) == "postgresql" else "sqlite+pysqlite"
    return parsed.set(drivername=driver)


@dataclass(frozen=True, slots=True)
class Address:
    """Where a database URL points, for messages: never its password."""

    backend: Backend
    shown: str
    """The URL with its password as ``***`` and its query left out (it may carry secrets)."""
    host: str | None
    port: int | None
    username: str | None
    database: str | None
    """PostgreSQL: the database's name; SQLite: the file's absolute path (``None`` in memory)."""


def address(url: str | URL) -> Address:
    """What messages may say of ``url``; a :class:`~caravel.errors.ValidationError` for a URL
    that is none of Caravel's."""
    parsed = _parse(url)
    backend = backend_of(parsed)
    database = parsed.database
    if backend == "sqlite" and database not in (None, "", ":memory:"):
        database = str(Path(database or "").absolute())
    return Address(
        backend=backend,
        shown=parsed.set(query={}).render_as_string(hide_password=True),
        host=parsed.host,
        port=parsed.port,
        username=parsed.username,
        database=database or None,
    )
