"""A job's completion in a transaction the caller owns, for the SQL stores: the fenced completion
statement the acknowledger runs, run instead on the handler's own session or connection, so the
handler's writes and its job's completion commit together or not at all
(``ctx.complete_in(session)``).

The completion is the acknowledger's plan (:meth:`~caravel.store.base.SqlStore._complete_plan`)
for one lease, with the statement that leaves the commit's durability to the caller's
transaction: the same fence (id, lease token, nonce, still running), the same result column, the
same attempt record. The triggers that release a chain's next step or a batch's callback fire in
that transaction too; a dialect whose releases are made by the store after the statement
(MariaDB) adds them to the plan (:meth:`_joined_complete_plan`).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from caravel.jobs import JobState, Lease
from caravel.store.plans import Plan
from caravel.store.schema import jobs
from caravel.store.transactions import ConnectionT, SqlTransactions
from caravel.store.values import Recorder

__all__ = ["JoinedCompletions"]

_COMPLETED_UNDER = (
    sa.select(jobs.c.id)
    .where(jobs.c.id == sa.bindparam("b_id", type_=sa.Uuid()))
    .where(jobs.c.lease_token == sa.bindparam("b_token", type_=sa.BigInteger()))
    .where(jobs.c.lease_nonce == sa.bindparam("b_nonce", type_=sa.BigInteger()))
    .where(jobs.c.state == JobState.COMPLETED.value)
)


class JoinedCompletions(SqlTransactions[ConnectionT]):
    """:meth:`~caravel.store.protocol.Store.job_complete_joined`, its blocking twin, and
    :meth:`~caravel.store.protocol.Store.job_completed_under`."""

    def _joined_complete_plan(
        self, lease: Lease, now: int, result: str | None, recorder: Recorder | None
    ) -> Plan[bool]:
        """The completion of ``lease`` in the caller's transaction; whether it held."""
        store: Any = self  # a SqlStore: this is one of its bases
        results = None if result is None else {lease.job_id: result}
        plan = store._complete_plan([lease], now, results, recorder, durable=True)
        done: set[Any] = yield from plan
        return bool(done)

    async def job_complete_joined(
        self,
        target: object,
        lease: Lease,
        now: int,
        *,
        result: str | None = None,
        recorder: Recorder | None = None,
    ) -> bool:
        from caravel.store.inserts import sessions

        store: Any = self
        plan = self._joined_complete_plan(lease, now, result, recorder)
        _, held = await sessions.run_joined(store, target, plan)
        return held

    def job_complete_joined_sync(
        self,
        target: object,
        lease: Lease,
        now: int,
        identity: str,
        *,
        result: str | None = None,
        recorder: Recorder | None = None,
    ) -> bool:
        from caravel.store.inserts import sessions

        store: Any = self
        plan = self._joined_complete_plan(lease, now, result, recorder)
        _, held = sessions.run_joined_sync(store, target, identity, plan)
        return held

    async def job_completed_under(self, lease: Lease) -> bool:
        params = {"b_id": lease.job_id, "b_token": lease.token, "b_nonce": lease.nonce}
        async with self._read("job_completed_under") as conn:
            rows = (await conn.execute(_COMPLETED_UNDER, params)).all()
        return bool(rows)
