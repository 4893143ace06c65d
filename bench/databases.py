"""Fresh, migrated databases for each measurement: a throwaway PostgreSQL or MariaDB database,
or a SQLite file in a temporary folder.

MariaDB is found at ``CARAVEL_BENCH_MARIADB_URL`` (default: the local server, user root with an
empty password), PostgreSQL at ``CARAVEL_BENCH_POSTGRES_URL``."""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy.engine import make_url

from caravel import migrate as migrations
from caravel.store.urls import backend_of

ADMIN_URL = os.environ.get("CARAVEL_BENCH_POSTGRES_URL", "postgresql://root@127.0.0.1:5432/test")
MARIADB_ADMIN_URL = os.environ.get(
    "CARAVEL_BENCH_MARIADB_URL", "mariadb://root@127.0.0.1:3306/test"
)
#: Under ``CI=true`` a MariaDB server that cannot be reached is an error, not a row left out.
IN_CI = os.environ.get("CI", "").lower() == "true"


def _dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@contextmanager
def database(backend: str, *, migrate: bool = True) -> Iterator[str]:
    """A migrated, empty queue database (``migrate=False``: an empty database); dropped or
    deleted afterwards."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix="caravel-bench-") as folder:
            url = f"sqlite:///{Path(folder) / 'queue.db'}"
            if migrate:
                migrations.upgrade(url)
            yield url
        return
    name = f"caravel_bench_{secrets.token_hex(4)}"
    if backend == "mariadb":
        with _mariadb_database(name) as url:
            if migrate:
                migrations.upgrade(url)
            yield url
        return
    with psycopg.connect(_dsn(ADMIN_URL), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = make_url(ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    try:
        if migrate:
            migrations.upgrade(url)
        yield url
    finally:
        with psycopg.connect(_dsn(ADMIN_URL), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def pg_setting(name: str) -> str:
    with psycopg.connect(_dsn(ADMIN_URL), autocommit=True) as conn:
        row = conn.execute("SELECT current_setting(%s)", (name,)).fetchone()
    return str(row[0]) if row else "?"


def postgres_dsn(url: str) -> str:
    return _dsn(url)


def completed_rows(url: str, queue: str) -> int:
    """The exact number of completed jobs of ``queue`` in the database at ``url``, counted row
    by row. ``queue_counts`` reports finished jobs past 10,000 per queue from the planner's
    statistics on PostgreSQL: an ANALYZE that ran while a drain was under way leaves it short of
    the rows written since, so a figure that must be exact is read here."""
    sql = "SELECT count(*) FROM caravel_jobs WHERE queue = %s AND state = 'completed'"
    backend = backend_of(url)
    if backend == "sqlite":
        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as lite:
            row = lite.execute(sql.replace("%s", "?"), (queue,)).fetchone()
    elif backend == "mariadb":
        with contextlib.closing(mariadb_connect(url)) as conn, conn.cursor() as cur:
            cur.execute(sql, (queue,))
            row = cur.fetchone()
    else:
        with psycopg.connect(_dsn(url), autocommit=True) as pg:
            row = pg.execute(sql, (queue,)).fetchone()
    return int(row[0]) if row else 0


# ----- MariaDB ----------------------------------------------------------------------------------


def mariadb_connect_args(url: str) -> dict[str, Any]:
    """Where ``url`` points, as PyMySQL's and asyncmy's ``connect`` take it (utf8mb4)."""
    parsed = make_url(url)
    return {
        "host": parsed.host or "127.0.0.1",
        "port": parsed.port or 3306,
        "user": parsed.username or "root",
        "password": parsed.password or "",
        "database": parsed.database,
        "charset": "utf8mb4",
    }


def mariadb_connect(url: str = MARIADB_ADMIN_URL, *, use_database: bool = True) -> Any:
    """A PyMySQL connection in autocommit to ``url``'s server (in its database when asked)."""
    import pymysql

    args = mariadb_connect_args(url)
    if not use_database:
        args["database"] = None
    return pymysql.connect(**args, autocommit=True, connect_timeout=5)


def mariadb_unreachable() -> str | None:
    """Why the MariaDB server at ``CARAVEL_BENCH_MARIADB_URL`` cannot be used (``None`` when it
    can): the driver missing, or the server not answering."""
    try:
        import pymysql
    except ImportError:
        return "PyMySQL is not installed (pip install 'caravel-queue[mariadb]')"
    try:
        conn = mariadb_connect(use_database=False)
    except pymysql.err.MySQLError as exc:
        reason = exc.args[1] if len(exc.args) > 1 else exc
        shown = make_url(MARIADB_ADMIN_URL).render_as_string(hide_password=True)
        return f"MariaDB is not reachable at {shown}: {reason}"
    conn.close()
    return None


@contextmanager
def _mariadb_database(name: str) -> Iterator[str]:
    """A new, empty MariaDB database, dropped afterwards (the sessions still in it killed
    first, as DROP DATABASE would wait on their metadata locks)."""
    with contextlib.closing(mariadb_connect(use_database=False)) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin")
    url = make_url(MARIADB_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        with contextlib.closing(mariadb_connect(use_database=False)) as conn, conn.cursor() as cur:
            cur.execute(
                "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = %s"
                " AND ID <> CONNECTION_ID()",
                (name,),
            )
            for (session,) in cur.fetchall():
                with contextlib.suppress(Exception):  # it ended meanwhile
                    cur.execute(f"KILL CONNECTION {int(session)}")
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


#: What decides how durable, and so how slow, a commit is on the MariaDB server.
MARIADB_FACTS = (
    "version",
    "innodb_flush_log_at_trx_commit",
    "innodb_flush_method",
    "innodb_doublewrite",
    "innodb_buffer_pool_size",
    "log_bin",
    "sync_binlog",
)


def mariadb_settings() -> dict[str, Any]:
    """The server's version and its durability settings, for the report."""
    with contextlib.closing(mariadb_connect(use_database=False)) as conn, conn.cursor() as cur:
        cur.execute("SELECT " + ", ".join(f"@@{name}" for name in MARIADB_FACTS))
        row = cur.fetchone()
    return dict(zip(MARIADB_FACTS, row, strict=True))
