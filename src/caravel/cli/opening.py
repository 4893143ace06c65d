"""Why a command could not open its database, in the operator's words, with the next step:
``could not open the queue database at postgresql://app:***@db:5432/jobs: database "jobs" does
not exist; create it (createdb -h db -p 5432 -U app jobs), then run `caravel db upgrade```.

Read from a :class:`~caravel.errors.StoreError`'s ``reason`` (the driver's own first line, which
the store keeps only when it is about the connection or the schema), so only a failure to reach
or open the database is reworded; any other failure keeps the store's message. The password
never appears: the URL is shown with ``***`` in its place and without its query. The exit code
is not this module's business: it stays the kind of error's (``caravel.cli.failure``).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from caravel.errors import DatabaseNotFoundError, StoreError, ValidationError

if TYPE_CHECKING:
    from caravel.store.urls import Address

__all__ = ["explain"]

#: What the driver says when it could not connect at all (psycopg's prefixes).
_UNREACHABLE = ("connection failed:", "connection is bad:", "failed to resolve host")
_NO_DATABASE = re.compile(r'database "(?P<name>[^"]*)" does not exist')
_NO_ROLE = re.compile(r'role "(?P<name>[^"]*)" does not exist')
_BAD_PASSWORD = re.compile(r'password authentication failed for user "(?P<name>[^"]*)"')


def explain(exc: BaseException, url: str, database: str = "queue") -> str | None:
    """The line (without the command's prefix) saying why ``url``'s ``database`` (``queue``,
    or ``application`` for the outbox relay's) could not be opened; ``None`` when ``exc`` is no
    failure to open it."""
    if not isinstance(exc, StoreError) or isinstance(exc, DatabaseNotFoundError):
        return None
    if exc.reason is None:
        return None
    from caravel.store.urls import address

    try:
        where = address(url)
    except ValidationError:
        return None
    if where.backend == "postgresql":
        said = _postgresql(exc.reason, where, database)
        shown = where.shown
    elif where.backend == "mariadb":
        said = _mariadb(exc.reason, where, database)
        shown = where.shown
    elif where.backend == "sqlite" and where.database is not None:
        said = _sqlite(exc.reason, Path(where.database))
        shown = where.database
    else:
        return None
    return None if said is None else f"could not open the {database} database at {shown}: {said}"


def _postgresql(reason: str, where: Address, database: str) -> str | None:
    if (found := _NO_DATABASE.search(reason)) is not None:
        name = found["name"]
        if database != "queue":
            return f'database "{name}" does not exist; check the database name in the URL'
        return (
            f'database "{name}" does not exist; create it ({_createdb(where, name)}), then '
            "run `caravel db upgrade`"
        )
    if (found := _NO_ROLE.search(reason)) is not None:
        return f'the server has no role "{found["name"]}"; check the user name in the URL'
    if (found := _BAD_PASSWORD.search(reason)) is not None:
        return (
            f'the server refused the password of user "{found["name"]}"; check the user name '
            "and password in the URL"
        )
    if "pg_hba.conf" in reason:
        # 'connection failed: connection to server at "h", port 5432 failed: FATAL: no
        # pg_hba.conf entry for ...': what the server said is after the last "failed:".
        server_said = reason.rsplit("failed:", 1)[-1].strip().removeprefix("FATAL:").strip()
        return (
            f"{server_said}; the server's pg_hba.conf does not let this user connect from here: "
            "connect as another user, or ask whoever runs the server"
        )
    if reason.startswith("failed to resolve host"):
        return f"{reason}; check the host name in the URL"
    if reason.startswith(_UNREACHABLE):
        detail = reason.split(":", 1)[1].strip()
        return f"{detail}; check that the server is running and the URL's host and port are right"
    return None


#: MariaDB's reasons as its driver words them: ``(1049, "Unknown database 'jobs'")``.
_MARIADB_REASON = re.compile(r"""^\((?P<code>\d+), ["'](?P<text>.*)["']\)$""")
_MARIADB_NAME = re.compile(r"'(?P<name>[^']*)'")


def _mariadb(reason: str, where: Address, database: str) -> str | None:
    found = _MARIADB_REASON.match(reason)
    if found is None:
        return None
    code, text = int(found["code"]), found["text"]
    named = _MARIADB_NAME.search(text)
    name = named["name"] if named else ""
    if code == 1049:  # unknown database
        if database != "queue":
            return f'database "{name}" does not exist; check the database name in the URL'
        return (
            f'database "{name}" does not exist; create it ({_create_database(where, name)}), '
            "then run `caravel db upgrade`"
        )
    if code in (1045, 1698):  # access denied
        return (
            f'the server refused user "{name}"; check the user name and password in the URL '
            "(and that the user may connect from this host)"
        )
    if code in (2002, 2003, 2005):  # no server there, or no such host
        # "Can't connect to MySQL server on 'h' (<why>)": the why, without its parentheses.
        detail = text.split(" (", 1)[1][:-1] if " (" in text and text.endswith(")") else text
        if "Name or service not known" in detail or code == 2005:
            return f"no host {where.host!r} could be found; check the host name in the URL"
        return (
            f"no MariaDB server answered at {where.host or 'localhost'}:{where.port or 3306} "
            f"({detail}); check that the server is running and the URL's host and port are right"
        )
    return None


def _create_database(where: Address, name: str) -> str:
    """The ``mariadb`` command that creates database ``name`` where the URL points, with the
    character set and collation the queue's tables use."""
    words = ["mariadb"]
    if where.host:
        words += ["-h", where.host]
    if where.port is not None:
        words += ["-P", str(where.port)]
    if where.username:
        words += ["-u", where.username]
    create = f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin"
    return shlex.join([*words, "-e", create])


def _createdb(where: Address, name: str) -> str:
    """The ``createdb`` command that makes database ``name`` where the URL points."""
    words = ["createdb"]
    if where.host:
        words += ["-h", where.host]
    if where.port is not None:
        words += ["-p", str(where.port)]
    if where.username:
        words += ["-U", where.username]
    return shlex.join([*words, name])


def _sqlite(reason: str, path: Path) -> str | None:
    if reason == "file is not a database":
        return "it is not a SQLite database; check that the URL names the right file"
    if reason not in ("unable to open database file", "disk I/O error"):
        return None
    if path.is_dir():
        return (
            f"it is a directory; name a database file inside it, such as "
            f"sqlite:///{path / 'queue.db'}"
        )
    if not path.parent.is_dir():
        return (
            f"the directory {path.parent} does not exist; create it (mkdir -p "
            f"{shlex.quote(str(path.parent))}) or fix the path in the URL"
        )
    return f"{reason}; check that this user may read and write the file and its directory"
