"""The MariaDB test infrastructure against real servers: the throwaway server of
:mod:`tests.faults.mariaserver` keeps what was committed through a clean stop, a SIGKILL and a
restart, and loses what was not; the database helpers of :mod:`tests.support.databases` make,
empty and drop databases of their own on the shared server."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest
from sqlalchemy.engine import make_url

from tests.faults.mariaserver import PrivateMariadb
from tests.support.databases import (
    MARIADB_ADMIN_URL,
    create_mariadb_database,
    drop_mariadb_database,
    mariadb_database,
    truncate_mariadb,
)

pytestmark = [pytest.mark.slow, pytest.mark.mariadb]


@contextlib.contextmanager
def connected(url: str) -> Iterator[Any]:
    """A cursor on ``url``'s database, autocommit off: nothing is kept until ``COMMIT``."""
    parsed = make_url(url)
    conn = pymysql.connect(
        host=parsed.host,
        port=parsed.port or 3306,
        user=parsed.username,
        password=parsed.password or "",
        database=parsed.database,
        autocommit=False,
        connect_timeout=5,
    )
    with conn, conn.cursor() as cursor:
        yield cursor


def rows(url: str) -> list[int]:
    with connected(url) as cursor:
        cursor.execute("SELECT n FROM kept ORDER BY n")
        return [n for (n,) in cursor.fetchall()]


def commit_row(url: str, n: int) -> None:
    with connected(url) as cursor:
        cursor.execute("INSERT INTO kept (n) VALUES (%s)", (n,))
        cursor.connection.commit()


def databases(admin_url: str) -> set[str]:
    with connected(admin_url) as cursor:
        cursor.execute("SHOW DATABASES")
        return {name for (name,) in cursor.fetchall()}


def refuses(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.serial
def test_committed_rows_survive_a_stop_a_kill_and_a_crash_restart(
    mariadb_server: PrivateMariadb,
) -> None:
    with mariadb_server.kept_running(), mariadb_server.database(migrated=False) as url:
        assert mariadb_server.owns(url)
        with connected(url) as cursor:
            cursor.execute("CREATE TABLE kept (n INT PRIMARY KEY) ENGINE=InnoDB")
        commit_row(url, 1)

        mariadb_server.stop()
        assert not mariadb_server.is_up()
        mariadb_server.start()
        assert rows(url) == [1]

        commit_row(url, 2)
        with connected(url) as cursor:  # open while the server dies: never committed
            cursor.execute("INSERT INTO kept (n) VALUES (99)")
            mariadb_server.kill()
            assert not mariadb_server.running()
            assert not mariadb_server.is_up()
            with pytest.raises(pymysql.err.OperationalError) as lost:
                cursor.connection.commit()
            assert lost.value.args[0] in (2006, 2013)
        mariadb_server.ensure_running()
        assert rows(url) == [1, 2]

        commit_row(url, 3)
        assert mariadb_server.restart(crash=True) < 60
        assert rows(url) == [1, 2, 3]
        assert mariadb_server.restart(crash=False) < 60
        assert rows(url) == [1, 2, 3]

        mariadb_server.ensure_running()  # already up: a no-op
        assert mariadb_server.is_up()


def test_a_private_server_runs_a_recent_mariadb_and_leaves_nothing_behind() -> None:
    server = PrivateMariadb.create()
    try:
        root, port = server.root, server.port
        with connected(server.admin_url) as cursor:
            cursor.execute("SELECT VERSION(), @@innodb_flush_log_at_trx_commit, @@bind_address")
            version, flush, bound = cursor.fetchone()
        assert "MariaDB" in version
        assert tuple(int(p) for p in version.split("-")[0].split(".")[:2]) >= (10, 6)
        assert (flush, bound) == (2, "127.0.0.1")
        with server.database(migrated=False) as url:
            assert make_url(url).port == port
            assert make_url(url).database in databases(server.admin_url)
        assert make_url(url).database not in databases(server.admin_url)
    finally:
        server.destroy()
    assert not root.exists()
    assert not server.running()
    assert refuses(port)


def test_database_helpers_make_empty_and_drop_databases_of_their_own() -> None:
    with mariadb_database(migrated=False) as url, mariadb_database(migrated=False) as other:
        name = make_url(url).database
        assert name is not None
        assert name != make_url(other).database
        assert name.startswith(f"caravel_test_{os.getpid()}_")
        assert make_url(url) == make_url(MARIADB_ADMIN_URL).set(database=name)
        with connected(url) as cursor:
            cursor.execute(
                "SELECT DEFAULT_CHARACTER_SET_NAME, DEFAULT_COLLATION_NAME"
                " FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s",
                (name,),
            )
            assert cursor.fetchone() == ("utf8mb4", "utf8mb4_nopad_bin")
            cursor.execute("CREATE TABLE parent (id INT PRIMARY KEY) ENGINE=InnoDB")
            cursor.execute(
                "CREATE TABLE child (id INT PRIMARY KEY, parent INT NOT NULL,"
                " FOREIGN KEY (parent) REFERENCES parent (id)) ENGINE=InnoDB"
            )
            cursor.execute("INSERT INTO parent VALUES (1), (2)")
            cursor.execute("INSERT INTO child VALUES (1, 1), (2, 2)")
            cursor.connection.commit()
        with connected(url) as idle:  # a session left open in the database
            idle.execute("SELECT COUNT(*) FROM parent")

            # Parents first, a table that does not exist: neither matters.
            truncate_mariadb(url, ("parent", "child", "missing"))
            with connected(url) as cursor:
                cursor.execute("SELECT COUNT(*) FROM parent UNION ALL SELECT COUNT(*) FROM child")
                assert cursor.fetchall() == ((0,), (0,))

            # An open transaction's metadata lock does not hold the drop up.
            drop_mariadb_database(url)
            assert name not in databases(MARIADB_ADMIN_URL)

    made = create_mariadb_database("caravel_helper")
    try:
        assert make_url(made).database in databases(MARIADB_ADMIN_URL)
    finally:
        drop_mariadb_database(made)
    assert make_url(made).database not in databases(MARIADB_ADMIN_URL)
    with pytest.raises(ValueError, match="refusing"):
        drop_mariadb_database(make_url(MARIADB_ADMIN_URL).set(database="mysql").render_as_string())
