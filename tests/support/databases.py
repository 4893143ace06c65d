"""Throwaway databases for tests: real PostgreSQL databases and real SQLite files.

PostgreSQL is found at ``CARAVEL_TEST_POSTGRES_URL`` (default: the local server, user root). When
``CI=true`` a test that needs PostgreSQL and cannot reach it fails; elsewhere it is skipped with
the reason. Every database is created with a name of its own (the process id and a random
suffix), so processes running tests side by side (pytest-xdist workers, other checkouts) never
share one. ``admin_url`` names another server (the fault suite's private cluster,
:mod:`tests.faults.pgserver`); by default it is ``ADMIN_URL``.
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
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from caravel import migrate
from tests.support import until

ADMIN_URL = os.environ.get("CARAVEL_TEST_POSTGRES_URL", "postgresql://root@127.0.0.1:5432/test")
IN_CI = os.environ.get("CI", "").lower() == "true"


def _admin_dsn(admin_url: str = ADMIN_URL) -> str:
    url = make_url(admin_url)
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def _server(url: str) -> tuple[str | None, int]:
    parsed = make_url(url)
    return parsed.host, parsed.port or 5432


def postgres_unavailable(reason: str, admin_url: str = ADMIN_URL) -> None:
    """Fail in CI, skip elsewhere."""
    message = f"PostgreSQL is not reachable at {admin_url}: {reason}"
    if IN_CI:
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def create_pg_database(prefix: str = "caravel_test", *, admin_url: str = ADMIN_URL) -> str:
    """Create an empty database on ``admin_url``'s server and return its URL."""
    name = f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"
    try:
        with psycopg.connect(_admin_dsn(admin_url), autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        postgres_unavailable(reason, admin_url)
    return make_url(admin_url).set(database=name).render_as_string(hide_password=False)


def drop_pg_database(url: str) -> None:
    """Drop ``url``'s database, through ``ADMIN_URL`` when it lives on that server and through
    the server's ``postgres`` database otherwise."""
    name = make_url(url).database
    admin = ADMIN_URL if _server(url) == _server(ADMIN_URL) else _with_database(url, "postgres")
    with psycopg.connect(_admin_dsn(admin), autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _with_database(url: str, database: str) -> str:
    return make_url(url).set(database=database).render_as_string(hide_password=False)


@contextmanager
def pg_database(*, migrated: bool, admin_url: str = ADMIN_URL) -> Iterator[str]:
    url = create_pg_database(admin_url=admin_url)
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


def sync_engine(url: str) -> sa.Engine:
    """A plain blocking engine on ``url``'s database that keeps no connection open."""
    parsed = make_url(url)
    driver = (
        "postgresql+psycopg" if parsed.get_backend_name() == "postgresql" else "sqlite+pysqlite"
    )
    return sa.create_engine(parsed.set(drivername=driver), poolclass=sa.pool.NullPool)


def execute_sql(url: str, *statements: str) -> None:
    """Run ``statements`` in one transaction on ``url``'s database."""
    engine = sync_engine(url)
    try:
        with engine.begin() as conn:
            for statement in statements:
                conn.exec_driver_sql(statement)
    finally:
        engine.dispose()


def empty_queue_tables(url: str) -> None:
    """Delete every row of the queue's tables on ``url``'s database, children first."""
    from caravel.store.schema import metadata

    tables = [table.name for table in reversed(metadata.sorted_tables)]
    execute_sql(url, *(f"DELETE FROM {name}" for name in tables))


async def pg_listeners(url: str, channel: str) -> int:
    """Sessions of ``url``'s PostgreSQL database that ran ``LISTEN channel`` and wait idle on
    it: a listener whose notifications will arrive."""
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        found = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND state = 'idle' AND query = %s",
            (f"LISTEN {channel}",),
        )
        row = await found.fetchone()
    return int(row[0]) if row else 0


async def until_listening(url: str, channel: str, *, beyond: int = 0) -> None:
    """Return once more than ``beyond`` sessions listen on ``channel`` (:func:`pg_listeners`),
    asking the server again until then: it has no event to say so."""

    async def listening() -> bool:
        return await pg_listeners(url, channel) > beyond

    await until(listening, what=f"a session to LISTEN {channel}")
