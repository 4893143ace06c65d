"""Throwaway databases for tests: real PostgreSQL databases and real SQLite files.

PostgreSQL is found at ``CARAVEL_TEST_POSTGRES_URL`` (default: the local server, user root). When
``CI=true`` a test that needs PostgreSQL and cannot reach it fails; elsewhere it is skipped with
the reason.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from caravel import migrate

ADMIN_URL = os.environ.get("CARAVEL_TEST_POSTGRES_URL", "postgresql://root@127.0.0.1:5432/test")
IN_CI = os.environ.get("CI", "").lower() == "true"


def _admin_dsn() -> str:
    url = make_url(ADMIN_URL)
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def postgres_unavailable(reason: str) -> None:
    """Fail in CI, skip elsewhere."""
    message = f"PostgreSQL is not reachable at {ADMIN_URL}: {reason}"
    if IN_CI:
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def create_pg_database(prefix: str = "caravel_test") -> str:
    """Create an empty database and return its URL."""
    name = f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"
    try:
        with psycopg.connect(_admin_dsn(), autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        postgres_unavailable(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    return make_url(ADMIN_URL).set(database=name).render_as_string(hide_password=False)


def drop_pg_database(url: str) -> None:
    name = make_url(url).database
    with psycopg.connect(_admin_dsn(), autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def pg_database(*, migrated: bool) -> Iterator[str]:
    url = create_pg_database()
    try:
        if migrated:
            migrate.upgrade(url)
        yield url
    finally:
        drop_pg_database(url)


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


class SqliteTemplate:
    """A migrated SQLite file copied for each test (cheaper than migrating each time)."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "template.db"
        migrate.upgrade(sqlite_url(self.path))

    def copy_to(self, target: Path) -> str:
        shutil.copyfile(self.path, target)
        return sqlite_url(target)


def truncate_pg(url: str, tables: tuple[str, ...]) -> None:
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE " + ", ".join(tables))
