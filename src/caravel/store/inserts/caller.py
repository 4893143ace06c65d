"""Inserts in a transaction the caller owns, for the SQL stores: which database a connection is
on, and the two ``job_insert_joined`` operations, which hand the store's insert plan to
:mod:`caravel.store.inserts.sessions` (imported only when a caller passes a session, with the
ORM)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from caravel.store.plans import Plan, Step, run_plan
from caravel.store.transactions import ConnectionT, SqlTransactions
from caravel.store.values import Committed, InsertResult, NewJob

__all__ = ["CallerInserts"]


class CallerInserts(SqlTransactions[ConnectionT]):
    """:meth:`~caravel.store.protocol.Store.job_insert_joined` and its blocking twin."""

    _identity: str | None = None

    def _identity_statement(self) -> Any:
        """A statement whose one row names the database a connection is on (the dialect's)."""
        raise NotImplementedError

    def _identity_of(self, rows: list[Any]) -> str:
        return str(rows[0][0]) if rows else ""

    def _identity_plan(self) -> Plan[str]:
        return self._identity_of((yield Step(self._identity_statement())))

    def _announce_committed(self, queues: set[str]) -> None:
        """Wake other processes' workers once the caller's transaction has committed jobs of
        ``queues``, where the dialect's wake-ups are not part of the transaction itself."""

    async def database_identity(self) -> str:
        if self._identity is None:
            async with self._read("database_identity") as conn:
                self._identity = await run_plan(conn.execute, self._identity_plan())
        return self._identity

    async def job_insert_joined(
        self, target: object, new_jobs: Sequence[NewJob], *, on_commit: Committed = None
    ) -> InsertResult:
        from caravel.store.inserts import sessions

        store: Any = self  # a SqlStore: this is one of its bases
        return await sessions.insert_async(store, target, new_jobs, on_commit)

    def job_insert_joined_sync(
        self,
        target: object,
        new_jobs: Sequence[NewJob],
        identity: str,
        *,
        on_commit: Committed = None,
    ) -> InsertResult:
        from caravel.store.inserts import sessions

        store: Any = self
        return sessions.insert_sync(store, target, new_jobs, identity, on_commit)
