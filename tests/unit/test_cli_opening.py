"""How the command line words a failure to open its database (``caravel.cli.opening``): read
from the driver's reason a :class:`StoreError` carries, with the next step, the password never
shown. The reasons here are the drivers' own first lines, as the acceptance tests meet them."""

from __future__ import annotations

from pathlib import Path

import pytest

from caravel.cli.opening import explain
from caravel.errors import DatabaseNotFoundError, SchemaNotReadyError, StoreError

PG = "postgresql://app:s3cret@db.internal:6543/jobs?sslpassword=hush"
REFUSED = (
    'connection failed: connection to server at "10.0.0.7", port 6543 failed: Connection refused'
)


def _pg(reason: str, url: str = PG, database: str = "queue") -> str | None:
    found = explain(StoreError("queue_counts", reason), url, database)
    if found is not None:
        assert "s3cret" not in found
        assert "hush" not in found
    return found


def test_a_refused_connection_names_the_masked_url_and_what_to_check() -> None:
    assert _pg(REFUSED) == (
        "could not open the queue database at postgresql://app:***@db.internal:6543/jobs: "
        'connection to server at "10.0.0.7", port 6543 failed: Connection refused; check that '
        "the server is running and the URL's host and port are right"
    )


def test_a_missing_database_says_how_to_create_it_where_the_url_points() -> None:
    reason = (
        'connection failed: connection to server at "10.0.0.7", port 6543 failed: FATAL: '
        'database "jobs" does not exist'
    )
    assert _pg(reason) == (
        "could not open the queue database at postgresql://app:***@db.internal:6543/jobs: "
        'database "jobs" does not exist; create it (createdb -h db.internal -p 6543 -U app '
        "jobs), then run `caravel db upgrade`"
    )
    # Without a host, port or user in the URL, createdb needs none either.
    bare = _pg(reason, "postgresql:///jobs")
    assert bare is not None
    assert "(createdb jobs), then" in bare
    # The relay's application database is not the queue's to create.
    other = _pg(reason, database="application")
    assert other is not None
    assert other.startswith("could not open the application database at ")
    assert other.endswith('database "jobs" does not exist; check the database name in the URL')


def test_a_database_name_that_needs_quoting_is_quoted_for_the_shell() -> None:
    reason = 'connection failed: FATAL: database "my jobs" does not exist'
    found = _pg(reason, "postgresql://app@db/my%20jobs")
    assert found is not None
    assert "(createdb -h db -U app 'my jobs')" in found


@pytest.mark.parametrize(
    ("reason", "said"),
    [
        (
            'connection failed: connection to server at "h", port 1 failed: FATAL: role "bob" '
            "does not exist",
            'the server has no role "bob"; check the user name in the URL',
        ),
        (
            'connection failed: connection to server at "h", port 1 failed: FATAL: password '
            'authentication failed for user "app"',
            'the server refused the password of user "app"; check the user name and password '
            "in the URL",
        ),
        (
            'connection failed: connection to server at "h", port 1 failed: FATAL: no '
            'pg_hba.conf entry for host "10.1.1.1", user "app", database "jobs", no encryption',
            'no pg_hba.conf entry for host "10.1.1.1", user "app", database "jobs", no '
            "encryption; the server's pg_hba.conf does not let this user connect from here: "
            "connect as another user, or ask whoever runs the server",
        ),
        (
            "failed to resolve host 'db.internal': [Errno -2] Name or service not known",
            "failed to resolve host 'db.internal': [Errno -2] Name or service not known; check "
            "the host name in the URL",
        ),
        (
            'connection is bad: connection to server on socket "/run/pg/.s.PGSQL.5432" failed: '
            "No such file or directory",
            'connection to server on socket "/run/pg/.s.PGSQL.5432" failed: No such file or '
            "directory; check that the server is running and the URL's host and port are right",
        ),
    ],
    ids=["no-role", "password", "pg-hba", "host-name", "socket"],
)
def test_what_the_server_said_and_the_next_step(reason: str, said: str) -> None:
    assert _pg(reason) == (
        f"could not open the queue database at postgresql://app:***@db.internal:6543/jobs: {said}"
    )


@pytest.mark.parametrize(
    "error",
    [
        StoreError("job_insert", None),  # a reason that could quote stored values is withheld
        StoreError("queue_pause", "cannot execute UPDATE in a read-only transaction"),
        StoreError("job_claim", "consuming input failed: server closed the connection"),
        SchemaNotReadyError("queue_counts found no queue table"),
        ValueError("not a store error"),
    ],
    ids=["no-reason", "read-only", "lost-later", "schema", "other"],
)
def test_anything_but_a_failure_to_open_keeps_its_own_message(error: BaseException) -> None:
    assert explain(error, PG) is None


def test_an_unusable_url_leaves_the_message_as_it_is() -> None:
    assert explain(StoreError("x", REFUSED), "mysql://nope") is None


def test_a_missing_sqlite_file_keeps_its_own_message(tmp_path: Path) -> None:
    missing = DatabaseNotFoundError("queue_counts", str(tmp_path / "q.db"))
    assert explain(missing, f"sqlite:///{tmp_path}/q.db") is None


def _sqlite(reason: str, path: Path) -> str | None:
    return explain(StoreError("queue_counts", reason), f"sqlite:///{path}")


def test_a_sqlite_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    assert _sqlite("file is not a database", path) == (
        f"could not open the queue database at {path}: it is not a SQLite database; check that "
        "the URL names the right file"
    )


@pytest.mark.parametrize("reason", ["unable to open database file", "disk I/O error"])
def test_a_sqlite_url_naming_a_directory(tmp_path: Path, reason: str) -> None:
    assert _sqlite(reason, tmp_path) == (
        f"could not open the queue database at {tmp_path}: it is a directory; name a database "
        f"file inside it, such as sqlite:///{tmp_path}/queue.db"
    )


def test_a_sqlite_file_in_a_directory_that_does_not_exist(tmp_path: Path) -> None:
    path = tmp_path / "no such dir" / "queue.db"
    assert _sqlite("unable to open database file", path) == (
        f"could not open the queue database at {path}: the directory {path.parent} does not "
        f"exist; create it (mkdir -p '{path.parent}') or fix the path in the URL"
    )


def test_a_sqlite_file_that_cannot_be_opened_for_another_reason(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    assert _sqlite("unable to open database file", path) == (
        f"could not open the queue database at {path}: unable to open database file; check "
        "that this user may read and write the file and its directory"
    )
    assert _sqlite("database is locked", path) is None


def test_a_relative_sqlite_path_is_shown_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    found = explain(StoreError("queue_counts", "file is not a database"), "sqlite:///q.db")
    assert found is not None
    assert found.startswith(f"could not open the queue database at {tmp_path / 'q.db'}: ")


MARIADB = "mariadb://app:s3cret@db.internal:3307/jobs?ssl_ca=hush"


def _maria(reason: str, database: str = "queue") -> str | None:
    return _pg(reason, MARIADB, database)


def test_mariadb_failures_to_open_say_what_to_do() -> None:
    shown = "could not open the queue database at mariadb://app:***@db.internal:3307/jobs: "
    assert _maria("""(1049, "Unknown database 'jobs'")""") == (
        f'{shown}database "jobs" does not exist; create it (mariadb -h db.internal -P 3307 -u '
        "app -e 'CREATE DATABASE `jobs` CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin'), "
        "then run `caravel db upgrade`"
    )
    assert _maria("""(1698, "Access denied for user 'app'@'10.0.0.9'")""") == (
        f'{shown}the server refused user "app"; check the user name and password in the URL '
        "(and that the user may connect from this host)"
    )
    refused = (
        "(2003, \"Can't connect to MySQL server on 'db.internal' ([Errno 111] Connect call "
        "failed ('10.0.0.7', 3307))\")"
    )
    assert _maria(refused) == (
        f"{shown}no MariaDB server answered at db.internal:3307 ([Errno 111] Connect call "
        "failed ('10.0.0.7', 3307)); check that the server is running and the URL's host and "
        "port are right"
    )
    unknown = (
        "(2003, \"Can't connect to MySQL server on 'db.internal' ([Errno -2] Name or service "
        'not known)")'
    )
    assert _maria(unknown) == (
        f"{shown}no host 'db.internal' could be found; check the host name in the URL"
    )
    # Anything else keeps the store's own message.
    assert _maria('(1064, "You have an error in your SQL syntax")') is None
