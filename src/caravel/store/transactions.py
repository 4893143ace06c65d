"""What every SQL store's operations run inside: a transaction of the dialect's kind, cut when
it outlives :attr:`~SqlTransactions.operation_timeout`, with the driver's errors translated into
Caravel's, and statements built once per store.

:class:`~caravel.store.base.SqlStore` writes the queue's operations on top of it; dialect modules
supply the transaction itself and what their errors mean.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Generic, Protocol, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from caravel.errors import StoreError
from caravel.store.errors import ErrorTranslation

__all__ = ["Connection", "ConnectionT", "SqlTransactions"]


class Connection(Protocol):
    """What the shared operations need of a connection inside a transaction: to execute a
    statement and return its result (SQLAlchemy's ``AsyncConnection`` is one)."""

    async def execute(self, statement: Any, parameters: Any = None, /) -> sa.Result[Any]: ...


ConnectionT = TypeVar("ConnectionT", bound=Connection)
T = TypeVar("T")

#: How often an operation is tried when it keeps losing deadlocks.
_DEADLOCK_TRIES = 4


class SqlTransactions(Generic[ConnectionT]):
    """Transactions over connections of the dialect's kind (``ConnectionT``), which its
    :meth:`_transaction` provides."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.closed = False
        self._translations: dict[str, ErrorTranslation] = {}

    # ----- dialect hooks -------------------------------------------------------------------

    def _is_schema_missing(self, exc: BaseException) -> bool:
        """Whether a driver error means the queue's tables or columns are missing."""
        return False

    def _is_outage(self, exc: BaseException) -> bool:
        """Whether a driver error means the database is unreachable for now rather than the
        operation wrong (see :attr:`StoreError.outage <caravel.errors.StoreError>`): none, unless
        the dialect says so."""
        return False

    def _is_deadlock(self, exc: BaseException) -> bool:
        """Whether a driver error means the database rolled the transaction back to break a
        deadlock (never, with one writer at a time)."""
        return False

    async def _deadlock_retried(self, run: Callable[[], Awaitable[T]]) -> T:
        """``run()``, run again when the database picked its transaction as a deadlock's
        victim. Finishing jobs of two batches locks their counts' rows in the order the jobs
        are updated, so two transactions can each hold the row the other waits for; the one
        rolled back has changed nothing, and its second try finds the other one committed."""
        for attempt in range(_DEADLOCK_TRIES):
            try:
                return await run()
            except StoreError as exc:
                cause = exc.__cause__
                if attempt + 1 == _DEADLOCK_TRIES or cause is None or not self._is_deadlock(cause):
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _transaction(
        self, *, readonly: bool, durable: bool = True, single: bool = False
    ) -> AbstractAsyncContextManager[ConnectionT]:
        """A transaction (every dialect provides it). ``durable=False`` lets a dialect skip
        waiting for the commit to reach disk (acknowledgements unless the worker asks for
        durable ones, and presence: losing one means the job runs again, or a heartbeat is
        missed). ``single=True`` says the work is one statement (or statements that need
        not be atomic together), so a dialect may run it without an explicit BEGIN and
        COMMIT."""
        raise NotImplementedError

    # ----- plumbing ------------------------------------------------------------------------

    #: The driver's own exceptions, for dialects that run some statements on it directly.
    driver_errors: tuple[type[Exception], ...] = ()

    def _translated(self, operation: str) -> ErrorTranslation:
        # One per operation name, made once: a translation holds no state of its own.
        found = self._translations.get(operation)
        if found is None:
            found = self._translations[operation] = ErrorTranslation(
                operation,
                driver_errors=self.driver_errors,
                schema_missing=self._is_schema_missing,
                explain=self._explain,
                outage=self._is_outage,
            )
        return found

    def _explain(self, operation: str) -> StoreError | None:
        """A better error than the driver's for an operation that failed, where the dialect can
        tell why (a SQLite file that does not exist)."""
        return None

    #: The longest any one store operation may take, commit included. Past it the operation's
    #: connection is cut, so a link that silently stopped answering becomes a
    #: :class:`~caravel.errors.StoreError` in bounded time instead of a hang.
    operation_timeout = 45.0

    def _sever(self, conn: ConnectionT) -> None:
        """Cut a connection that is stuck mid-operation (dialects that can, do)."""

    @asynccontextmanager
    async def _deadline(self, **kwargs: bool) -> AsyncIterator[ConnectionT]:
        holder: list[ConnectionT] = []

        def expire() -> None:
            if holder:
                self._sever(holder[0])

        timer = asyncio.get_running_loop().call_later(self.operation_timeout, expire)
        try:
            async with self._transaction(**kwargs) as conn:
                holder.append(conn)
                yield conn
        finally:
            timer.cancel()

    @asynccontextmanager
    async def _write(
        self, operation: str, *, durable: bool = True, single: bool = False
    ) -> AsyncIterator[ConnectionT]:
        async with (
            self._translated(operation),
            self._deadline(readonly=False, durable=durable, single=single) as conn,
        ):
            yield conn

    @asynccontextmanager
    async def _read(self, operation: str, *, single: bool = True) -> AsyncIterator[ConnectionT]:
        async with (
            self._translated(operation),
            self._deadline(readonly=True, single=single) as conn,
        ):
            yield conn

    def _statement(self, name: str, build: Callable[[], Any]) -> Any:
        """Statements built once per store and reused with new parameters."""
        cache: dict[str, Any] = self.__dict__.setdefault("_statements", {})
        found = cache.get(name)
        if found is None:
            found = cache[name] = build()
        return found
