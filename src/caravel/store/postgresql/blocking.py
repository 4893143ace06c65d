"""The blocking connections callers' threads use for the sync facade's one-job enqueue (see
:mod:`caravel.store.blocking`): psycopg's own, in autocommit, each with a binary cursor kept
with it, and one use of one of them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import TracebackType
from typing import Any, NamedTuple

import psycopg

from caravel.store.blocking import Deadlines, KeptConnections
from caravel.store.errors import ErrorTranslation

__all__ = ["BlockingUse", "blocking_connections"]


class Blocking(NamedTuple):
    """A blocking connection in autocommit, and a binary cursor kept with it: making a cursor
    per statement costs a noticeable share of a one-job enqueue."""

    connection: psycopg.Connection[Any]
    cursor: psycopg.Cursor[Any]


def blocking_connections(
    connect: Callable[[], psycopg.Connection[Any]], *, keep: int, limit: int
) -> KeptConnections[Blocking]:
    """Connections made by ``connect`` (in autocommit), up to ``keep`` of them kept idle and
    ``limit`` open."""

    def open_() -> Blocking:
        conn = connect()
        return Blocking(conn, conn.cursor(binary=True))

    return KeptConnections(
        open_,
        lambda kept: kept.connection.close(),
        keep=keep,
        limit=limit,
        usable=_reusable,
        broken=lambda kept: kept.connection.broken,
    )


def _reusable(kept: Blocking) -> bool:
    # Read off the libpq connection: ``info`` builds an object and an enum per call.
    idle = kept.connection.pgconn.transaction_status == _IDLE
    return idle and not kept.connection.broken


_IDLE = psycopg.pq.TransactionStatus.IDLE


class BlockingUse:
    """One use of a blocking connection by a caller's thread, entered with ``with``: takes one,
    has it cut past ``timeout`` (``deadlines``, looked after by the store's event loop
    ``loop``), gives it back, and translates errors, as a hot connection's use does on the
    loop. Inside the block, the connection's kept cursor, or ``None`` when as many connections
    as allowed are in use already (the caller then hands its work to the loop, whose pool
    queues it)."""

    __slots__ = (
        "_connections",
        "_deadlines",
        "_kept",
        "_loop",
        "_timeout",
        "_token",
        "_translation",
    )

    def __init__(
        self,
        connections: KeptConnections[Blocking],
        deadlines: Deadlines[Any],
        translation: ErrorTranslation,
        timeout: float,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._connections = connections
        self._deadlines = deadlines
        self._translation = translation
        self._timeout = timeout
        self._loop = loop

    def __enter__(self) -> psycopg.Cursor[Any] | None:
        with self._translation:
            self._kept = self._connections.take()
        if self._kept is None:
            return None
        self._token = self._deadlines.begin(self._kept.connection, self._timeout, self._loop)
        return self._kept.cursor

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._kept is not None:
            self._deadlines.end(self._token)
            self._connections.put(self._kept)
        self._translation.__exit__(kind, exc, traceback)
