"""Throwaway databases for tests: real PostgreSQL and MariaDB databases and real SQLite files.

PostgreSQL is found at ``CARAVEL_TEST_POSTGRES_URL`` (default: the local server, user root). When
``CI=true`` a test that needs PostgreSQL and cannot reach it fails; elsewhere it is skipped with
the reason. Every database is created with a name of its own (the process id and a random
suffix), so processes running tests side by side (pytest-xdist workers, other checkouts) never
share one. ``admin_url`` names another server (the fault suite's private cluster,
:mod:`tests.faults.pgserver`); by default it is ``ADMIN_URL``.

MariaDB is found at ``CARAVEL_TEST_MARIADB_URL`` (default: the local server, user root with an
empty password) and handled the same way: unreachable fails under ``CI=true`` and skips
elsewhere, every database has a name of its own, and ``admin_url`` names another server (the
fault suite's private one, :mod:`tests.faults.mariaserver`). These helpers talk to it through
PyMySQL directly, not through Caravel.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import psycopg
import pymysql
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from caravel import migrate
from caravel.store.urls import sync_url
from tests.support import until

ADMIN_URL = os.environ.get("CARAVEL_TEST_POSTGRES_URL", "postgresql://root@127.0.0.1:5432/test")
MARIADB_ADMIN_URL = os.environ.get("CARAVEL_TEST_MARIADB_URL", "mariadb://root@127.0.0.1:3306/test")
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


# ----- MariaDB ----------------------------------------------------------------------------------

#: Databases the helpers refuse to drop or empty, whatever URL they are handed.
_MARIADB_SYSTEM = frozenset({"mysql", "information_schema", "performance_schema", "sys"})


def mariadb_connect(url: str, *, use_database: bool = True) -> Any:
    """A PyMySQL connection (autocommit) to ``url``'s server, in its database when asked."""
    parsed = make_url(url)
    return pymysql.connect(
        host=parsed.host or "127.0.0.1",
        port=parsed.port or 3306,
        user=parsed.username or "root",
        password=parsed.password or "",
        database=parsed.database if use_database else None,
        autocommit=True,
        connect_timeout=5,
        charset="utf8mb4",
    )


def mariadb_unavailable(reason: str, admin_url: str = MARIADB_ADMIN_URL) -> NoReturn:
    """Fail in CI, skip elsewhere."""
    shown = make_url(admin_url).render_as_string(hide_password=True)
    message = f"MariaDB is not reachable at {shown}: {reason}"
    if IN_CI:
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def _mariadb_name(url: str) -> str:
    name = make_url(url).database
    if not name or name in _MARIADB_SYSTEM or "`" in name:
        raise ValueError(f"refusing to touch the MariaDB database {name!r}")
    return name


def create_mariadb_database(
    prefix: str = "caravel_test", *, admin_url: str = MARIADB_ADMIN_URL
) -> str:
    """Create an empty database (utf8mb4, binary NO PAD collation: keys compare byte for byte,
    trailing spaces included, as on the other databases) on ``admin_url``'s server and return
    its URL."""
    name = f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"
    try:
        conn = mariadb_connect(admin_url, use_database=False)
    except pymysql.err.OperationalError as exc:
        mariadb_unavailable(str(exc.args[1] if len(exc.args) > 1 else exc), admin_url)
    with conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin")
    return make_url(admin_url).set(database=name).render_as_string(hide_password=False)


def drop_mariadb_database(url: str) -> None:
    """Drop ``url``'s database (on the server the URL names). Sessions still in it are killed
    first: DROP DATABASE would otherwise wait on the metadata locks of any open transaction
    (PostgreSQL's ``WITH (FORCE)``)."""
    name = _mariadb_name(url)
    with mariadb_connect(url, use_database=False) as conn, conn.cursor() as cursor:
        cursor.execute(
            "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = %s AND ID <> CONNECTION_ID()",
            (name,),
        )
        for (session,) in cursor.fetchall():
            with contextlib.suppress(pymysql.err.OperationalError):  # it ended meanwhile
                cursor.execute(f"KILL CONNECTION {int(session)}")
        cursor.execute("SET SESSION lock_wait_timeout = 60")
        cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")


@contextmanager
def mariadb_database(*, migrated: bool, admin_url: str = MARIADB_ADMIN_URL) -> Iterator[str]:
    """A new database on ``admin_url``'s server, migrated to the queue schema when asked;
    dropped afterwards."""
    url = create_mariadb_database(admin_url=admin_url)
    try:
        if migrated:
            migrate.upgrade(url)
        yield url
    finally:
        drop_mariadb_database(url)


def truncate_mariadb(url: str, tables: tuple[str, ...]) -> None:
    """Delete every row of those of ``tables`` that exist in ``url``'s database, in one
    transaction, foreign keys unchecked meanwhile (so the order does not matter). DELETE rather
    than TRUNCATE: InnoDB's TRUNCATE recreates each table's file, about five times slower here
    for a test's few rows."""
    name = _mariadb_name(url)
    with mariadb_connect(url) as conn, conn.cursor() as cursor:
        cursor.execute(
            "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s",
            (name,),
        )
        present = {row[0] for row in cursor.fetchall()}
        cursor.execute("SET SESSION FOREIGN_KEY_CHECKS = 0")
        cursor.execute("START TRANSACTION")
        for table in tables:
            if table in present:
                cursor.execute(f"DELETE FROM `{table}`")
        cursor.execute("COMMIT")


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
    return sa.create_engine(sync_url(url), poolclass=sa.pool.NullPool)


def dbapi_connection(url: str) -> Any:
    """A bare DB-API connection to ``url``'s database, of the driver a caller would use:
    ``sqlite3``, psycopg or PyMySQL."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        import sqlite3

        return sqlite3.connect(parsed.database or "")
    if backend in ("mariadb", "mysql"):
        conn = mariadb_connect(url)
        conn.autocommit(False)  # the caller's own transaction, as the other drivers open it
        return conn
    return psycopg.connect(_admin_dsn(url))


def create_database_like(url: str, directory: Path) -> str:
    """An empty database of the same kind as ``url``'s (a SQLite file in ``directory``)."""
    backend = make_url(url).get_backend_name()
    if backend == "sqlite":
        return sqlite_url(directory / "other.db")
    if backend in ("mariadb", "mysql"):
        return create_mariadb_database("caravel_other")
    return create_pg_database("caravel_other")


def drop_database(url: str) -> None:
    """Drop ``url``'s database (:func:`create_database_like`'s); a SQLite file stays."""
    backend = make_url(url).get_backend_name()
    if backend in ("mariadb", "mysql"):
        drop_mariadb_database(url)
    elif backend != "sqlite":
        drop_pg_database(url)


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
