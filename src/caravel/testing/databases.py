"""Throwaway databases for the pytest plugin: a migrated SQLite file copied per test, and a
PostgreSQL database created on a given server for one test session, emptied before each test.

A database is never reused between sessions or shared between processes: its name carries the
process id and a random suffix, and it is dropped when the session ends.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from caravel import migrate
from caravel.errors import StoreError

__all__ = ["PostgresUnreachable", "SqliteTemplate", "postgres_database", "truncate_queue_tables"]


class SqliteTemplate:
    """A SQLite file migrated once; each test gets a copy (cheaper than migrating each time)."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "template.db"
        migrate.upgrade(f"sqlite:///{self.path}")

    def copy_to(self, target: Path) -> str:
        shutil.copyfile(self.path, target)
        return f"sqlite:///{target}"


class PostgresUnreachable(StoreError):
    """The server a PostgreSQL URL names did not answer; ``reason`` is the driver's first
    line."""

    def __init__(self, reason: str) -> None:
        super().__init__("create the test database", reason)


def _dsn(url: str, database: str | None = None) -> str:
    """A libpq connection string for ``url`` (optionally naming another database)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url).set(drivername="postgresql")
    if database is not None:
        parsed = parsed.set(database=database)
    return parsed.render_as_string(hide_password=False)


@contextmanager
def postgres_database(admin_url: str) -> Iterator[str]:
    """Create a fresh database on ``admin_url``'s server, migrate it, yield its URL and drop it
    at the end. Raises :class:`PostgresUnreachable` when the server cannot be reached."""
    import psycopg
    from sqlalchemy.engine import make_url

    name = f"caravel_test_{os.getpid()}_{secrets.token_hex(4)}"
    try:
        with psycopg.connect(_dsn(admin_url), autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise PostgresUnreachable(reason) from exc
    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    try:
        migrate.upgrade(url)
        yield url
    finally:
        with psycopg.connect(_dsn(admin_url), autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def truncate_queue_tables(url: str) -> None:
    """Empty every queue table of ``url``'s database (the schema stays)."""
    import psycopg

    from caravel.store.schema import metadata

    with psycopg.connect(_dsn(url), autocommit=True, connect_timeout=5) as conn:
        conn.execute("TRUNCATE " + ", ".join(metadata.tables))
