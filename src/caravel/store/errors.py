"""The store's one error translation: a SQLAlchemy or driver error raised during an operation
becomes a :class:`~caravel.errors.StoreError` naming the operation (or, where the store can tell
the queue's tables are missing, a :class:`~caravel.errors.SchemaNotReadyError`), with the original
as its ``__cause__``. The queue's dialect stores and the outbox store all go through it.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from types import TracebackType

import sqlalchemy as sa

from caravel.errors import SchemaNotReadyError, StoreError

__all__ = ["ErrorTranslation", "driver_reason", "lost_connection"]

#: Driver errors whose text can quote stored values (a key, a too-long string): never shown.
_QUOTING = frozenset({"IntegrityError", "DataError"})
_LONGEST_REASON = 240


def driver_reason(exc: BaseException) -> str | None:
    """The driver's own reason for ``exc`` in one line (its first), when that reason is about
    the connection or the schema; ``None`` for an error whose text can quote stored values, or
    one with no text."""
    orig = getattr(exc, "orig", None) or exc
    if any(kind.__name__ in _QUOTING for kind in type(orig).__mro__):
        return None
    first = next((line.strip() for line in str(orig).splitlines() if line.strip()), "")
    printable = " ".join("".join(ch for ch in first if ch.isprintable()).split())
    return printable[:_LONGEST_REASON] or None


#: Socket errors that say the server cannot be reached now, not that anything was asked wrong.
_UNREACHABLE = frozenset(
    {
        errno.ECONNREFUSED,
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.EPIPE,
        errno.ETIMEDOUT,
        errno.EHOSTUNREACH,
        errno.ENETUNREACH,
        errno.ENETDOWN,
    }
)


def lost_connection(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection to the server was lost or could not be made, in
    terms every dialect shares: SQLAlchemy found the connection dead (its dialect's own test of
    a disconnect), the pool gave up waiting for a connection, or a socket error of an
    unreachable server. Each dialect adds its own codes (its ``outages`` module)."""
    if isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated:
        return True
    if isinstance(exc, sa.exc.TimeoutError):  # the pool: every connection stuck on a dead link
        return True
    for found in (exc, getattr(exc, "orig", None), exc.__cause__):
        if isinstance(found, (ConnectionError, TimeoutError)):
            return True
        if isinstance(found, OSError) and found.errno in _UNREACHABLE:
            return True
    return False


class ErrorTranslation:
    """Translates database errors raised in its block, entered with ``with`` or ``async with``.

    ``driver_errors`` are the driver's own exceptions (for statements a store runs on the driver
    directly); ``schema_missing`` says whether an error means the queue's tables or columns are
    missing. Any other exception propagates as it is.

    A plain class, not a generator-based context manager: stores enter one per operation, the
    one-job enqueue included.

    ``outage`` says whether an error means the database is unreachable for now (see
    :attr:`StoreError.outage <caravel.errors.StoreError>`); the dialect decides."""

    __slots__ = ("driver_errors", "explain", "operation", "outage", "schema_missing")

    def __init__(
        self,
        operation: str,
        *,
        driver_errors: tuple[type[Exception], ...] = (),
        schema_missing: Callable[[BaseException], bool] | None = None,
        explain: Callable[[str], StoreError | None] | None = None,
        outage: Callable[[BaseException], bool] | None = None,
    ) -> None:
        self.operation = operation
        self.driver_errors = driver_errors
        self.schema_missing = schema_missing
        #: A better error for a failed operation, where the store can tell why (a SQLite file
        #: that does not exist); asked only once an operation has failed.
        self.explain = explain
        self.outage = outage

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is None:
            return
        if not isinstance(exc, (sa.exc.SQLAlchemyError, OSError, *self.driver_errors)):
            return
        explained = None if self.explain is None else self.explain(self.operation)
        if explained is not None:
            raise explained from exc
        if self.schema_missing is not None and self.schema_missing(exc):
            raise SchemaNotReadyError(f"{self.operation} found no queue table") from exc
        outage = self.outage is not None and self.outage(exc)
        raise StoreError(self.operation, driver_reason(exc), outage=outage) from exc

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.__exit__(kind, exc, traceback)
