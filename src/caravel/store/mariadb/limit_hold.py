"""How long a stalled limited claim may keep its queue's limits row locked on MariaDB, and what
its worker makes of the session the server ended.

As on PostgreSQL (:mod:`caravel.store.postgresql.limit_hold`), a limited claim locks the
queue's row of ``caravel_queue_limits`` (``FOR UPDATE``) for the few statements of its
transaction, and a claimer stopped in that moment (SIGSTOP, a debugger, a frozen VM) or whose
link went silent would hold every other limited claim of the queue up until its transaction
ended. MariaDB's ``idle_transaction_timeout`` ends a session that waits longer than that many
seconds for its next statement inside a transaction; the server rolls the claim back, which
releases the lock, and the next claim in line goes ahead. The variable has no per-transaction
form, so the claim's transaction sets it for the session as its first statement (:data:`HOLD`;
the ``SET`` itself starts no InnoDB transaction, the lock right after it does), and the store
sets it back (:data:`UNHOLD`) on the same connection once the transaction ended, before the pool
lends the connection to anything else. So only the store's own limited claims run under the
bound: none of its other operations, and never a session of the application's (an enqueue with
``session=`` runs on the caller's connection). The server counts whole seconds, so the bound is
:func:`hold_seconds` of the store's ``limit_hold_timeout``: 2 s, the figure PostgreSQL has.

A claimer that comes back finds its session gone: the driver reports a lost connection. A claim
whose last statement had not yet returned had not asked to commit: it was rolled back. One that
had (only the commit was left) is settled by its rows (:func:`held`): a job it claimed that is
still running under the claim's lease token and expiry, held by its worker, means it committed;
none means it was rolled back (another worker may have claimed those jobs since, under its own
worker id). That read locks the rows, so it waits for a commit still under way on the server.
The store logs a rolled-back claim in one line and returns an empty batch; the worker's fetcher
claims again from its next step, with a fresh clock.
"""

from __future__ import annotations

import math
from typing import Any

import sqlalchemy as sa

from caravel.store.rows import CLAIM_RETURNING, RUNNING
from caravel.store.schema import jobs

__all__ = ["HELD", "HOLD", "UNHOLD", "held_params", "hold_seconds"]

#: The statement that bounds the session's idle time inside a transaction, in whole seconds.
HOLD = "SET SESSION idle_transaction_timeout = {seconds}"
#: The statement that takes the bound off again: back to the server's own setting.
UNHOLD = "SET SESSION idle_transaction_timeout = DEFAULT"


def hold_seconds(timeout: float) -> int:
    """``timeout`` as MariaDB can take it: whole seconds, rounded up, at least one (zero would
    turn the bound off)."""
    return max(1, math.ceil(timeout))


#: The jobs, among those a claim returned, still running under that claim's lease: bound as
#: ``b_ids``, ``b_leases`` (``(id, lease_token, lease_expires_at)`` each) and ``b_worker``.
#: Locked, so a commit of the claim still under way has ended before the rows are read.
HELD = (
    sa.select(jobs.c.id)
    .where(
        jobs.c.id.in_(sa.bindparam("b_ids", expanding=True, type_=sa.Uuid())),
        sa.tuple_(jobs.c.id, jobs.c.lease_token, jobs.c.lease_expires_at).in_(
            sa.bindparam(
                "b_leases",
                expanding=True,
                type_=sa.TupleType(sa.Uuid(), sa.BigInteger(), sa.BigInteger()),
            )
        ),
        jobs.c.state == RUNNING,
        jobs.c.worker_id == sa.bindparam("b_worker", type_=sa.Uuid()),
    )
    .with_for_update()
)


# Where the columns HELD compares are in a claim's rows (CLAIM_RETURNING's order).
_ID, _STATE, _TOKEN, _EXPIRES = (
    [column.name for column in CLAIM_RETURNING].index(name)
    for name in ("id", "state", "lease_token", "lease_expires_at")
)


def held_params(rows: list[Any], worker: Any) -> dict[str, Any] | None:
    """What :data:`HELD` binds for the running jobs among a claim's ``rows``; ``None`` when it
    claimed none (it only dead-lettered expired leases: it leased nothing either way)."""
    leases = [(row[_ID], row[_TOKEN], row[_EXPIRES]) for row in rows if row[_STATE] == RUNNING]
    if not leases:
        return None
    return {"b_ids": [lease[0] for lease in leases], "b_leases": leases, "b_worker": worker}
