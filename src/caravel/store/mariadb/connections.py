"""How the MariaDB store reaches the server: the engine, the session every connection starts
with, and the version check.

Every session runs at ``READ COMMITTED`` (as on PostgreSQL: a claim's ``SKIP LOCKED`` read and
the statements after it see what committed since, and InnoDB takes no gap locks), with
``SIMULTANEOUS_ASSIGNMENT`` (an ``UPDATE``'s assignments all read the row as it was, as the
SQL standard and the other databases have it; MariaDB otherwise reads a column assigned earlier
in the same statement as already changed) and ``STRICT_ALL_TABLES`` (a value that does not fit
is an error, never a silent truncation); it keeps no warning texts (``max_error_count = 0``), so
no stored value reaches the driver's log through one. No statement may run longer than
:data:`STATEMENT_SECONDS`, nor wait longer than :data:`LOCK_WAIT_SECONDS` for a row lock.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from caravel.errors import DatabaseVersionError
from caravel.store.urls import async_url

__all__ = [
    "LOCK_WAIT_SECONDS",
    "OLDEST_VERSION",
    "STATEMENT_SECONDS",
    "connect_keeping_cancels",
    "create_engine",
    "cut",
    "session_setup",
]

#: The oldest MariaDB the store runs on: 10.6 brought ``SKIP LOCKED`` and 10.7 the ``UUID``
#: type the schema uses; 10.11 is the oldest long-term release still maintained (10.6's
#: maintenance ended in July 2026), and the one the suite runs on.
OLDEST_VERSION = (10, 11)

#: The longest one statement may run (``max_statement_time``), as on PostgreSQL.
STATEMENT_SECONDS = 30

#: The longest a statement waits for a row lock before the server gives up on it
#: (``innodb_lock_wait_timeout``); the store retries a statement that lost such a wait.
LOCK_WAIT_SECONDS = 10

# max_error_count = 0 keeps no warning texts: an INSERT IGNORE that skips a duplicate warns
# "Duplicate entry '<the key>' ...", which the driver would fetch and log, keys and all.
_SESSION = (
    "SET SESSION sql_mode = CONCAT(@@sql_mode, ',SIMULTANEOUS_ASSIGNMENT,STRICT_ALL_TABLES'),"
    f" max_statement_time = {STATEMENT_SECONDS},"
    " max_error_count = 0,"
    f" innodb_lock_wait_timeout = {LOCK_WAIT_SECONDS},"
    " time_zone = '+00:00'"
)

_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)")


def check_version(version: str) -> None:
    """Raise :class:`~caravel.errors.DatabaseVersionError` unless ``version`` (what the server's
    ``VERSION()`` says) is a MariaDB of :data:`OLDEST_VERSION` or newer. MySQL, whose
    ``SKIP LOCKED`` and ``RETURNING`` differ, is not a MariaDB."""
    needed = ".".join(map(str, OLDEST_VERSION))
    # The handshake's form starts "5.5.5-" for clients that read only the first number.
    version = version.removeprefix("5.5.5-")
    found = _VERSION.match(version)
    if "mariadb" not in version.lower():
        number = found.group(0) if found else version
        raise DatabaseVersionError("MariaDB", f"(a MySQL {number} server)", needed)
    if found is None or (int(found.group(1)), int(found.group(2))) < OLDEST_VERSION:
        raise DatabaseVersionError("MariaDB", version.split("-")[0], needed)


def session_setup(dbapi_connection: Any, *, read_only: bool = False) -> None:
    """Check the server's version and set the session up (see the module's docstring), on a
    connection the driver just opened."""
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("SELECT VERSION()")
        check_version(str(cursor.fetchone()[0]))
        cursor.execute(_SESSION)
        if read_only:
            cursor.execute("SET SESSION TRANSACTION READ ONLY")
    finally:
        cursor.close()


def create_engine(
    url: str | sa.URL, *, pool_size: int = 20, read_only: bool = False
) -> AsyncEngine:
    """An async engine for a MariaDB URL, through asyncmy, at ``READ COMMITTED``.

    The pool keeps up to ``pool_size`` connections open and opens up to as many again under a
    burst; a connection idle for an hour is replaced (the server closes idle ones after its
    ``wait_timeout``). With ``read_only`` every session is read-only, so the server refuses any
    write on it."""
    engine = create_async_engine(
        async_url(url),
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_recycle=3600,
        isolation_level="READ COMMITTED",
        connect_args={
            "charset": "utf8mb4",
            "connect_timeout": 10,
            "async_creator_fn": connect_keeping_cancels,
        },
    )

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        session_setup(dbapi_connection, read_only=read_only)

    event.listen(engine.sync_engine, "connect", on_connect)
    return engine


async def connect_keeping_cancels(*args: Any, **kwargs: Any) -> Any:
    """asyncmy's ``connect``, but a cancel of the calling task that arrives while it connects
    is never lost: the new connection is closed and the cancel raised.

    asyncmy waits for its socket with ``asyncio.wait_for``, which before Python 3.12 returns the
    result instead of raising when the cancel lands just as the socket is ready. The operation
    then went on as if never cancelled, and a stopping worker waited for ever on a loop it had
    cancelled. A cancel requested during the call and not taken back (``Task.uncancel``) while
    the call returned normally is one that was swallowed."""
    import asyncmy  # the driver the URL names; imported only where it is used

    task = asyncio.current_task()
    before = 0 if task is None else task.cancelling()
    conn = await asyncmy.connect(*args, **kwargs)
    if task is not None and task.cancelling() > before:
        conn.close()
        raise asyncio.CancelledError
    return conn


logger = logging.getLogger("caravel.store")


def cut(conn: AsyncConnection) -> None:
    """Abort the socket under ``conn`` (whatever waits on it fails at once as a lost
    connection): an operation stuck past its deadline, on a link that stopped answering. Runs
    from a timer, so it never raises."""
    try:
        driver: Any = conn.sync_connection.connection.driver_connection  # type: ignore[union-attr]
        driver._transport.abort()
    except Exception:  # already closed, or no transport: nothing to cut
        logger.debug("could not cut a stuck connection")
    else:
        logger.warning("a database operation exceeded its deadline; its connection was cut")
