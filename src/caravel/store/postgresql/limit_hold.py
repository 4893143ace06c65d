"""How long a stalled limited claim may keep its queue's limits row locked on PostgreSQL, and
what its worker makes of the session the server ended.

A limited claim locks the queue's row of ``caravel_queue_limits`` (``FOR UPDATE``) for the few
statements of its transaction, so the queue's limited claims take turns. A worker stopped in
that moment (SIGSTOP, a debugger, a frozen VM) or whose link went silent would hold the lock
until its transaction ended, and every other limited claim of the queue would wait. So the
statement that takes the lock (:func:`bounded_lock`) also sets
``idle_in_transaction_session_timeout`` for that transaction only: once the server has waited
:data:`LIMIT_HOLD_TIMEOUT` for the claimer's next statement, it ends the session, which rolls
the claim back and releases the lock, and the next claim in line goes ahead. Nothing the
rolled-back claim picked was leased: its jobs are ready again, unchanged, so no job is lost or
run twice, and no limit is exceeded.

A claimer that comes back finds its session gone: the driver reports the server's reason
(SQLSTATE ``25P03``) or, as often, just a connection closed under it. Either way (the
connection is left broken), a claim that had not yet asked to commit was rolled back. One that had
(the session went during its COMMIT) is looked up by its transaction id, which the lock
statement reads (:func:`tapped` notes it): ``pg_xact_status`` (:data:`XACT_STATUS`) says
whether it committed, so its jobs are either returned as claimed or known to be ready again.
The store logs a rolled-back claim in one line (:func:`log_rolled_back`) and returns an empty
batch; the worker's fetcher claims again from its next step, with a fresh clock (retrying at
once would lease jobs from the time read before the stall).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from caravel.errors import StoreError
from caravel.store.limited.hold import LIMIT_HOLD_TIMEOUT, log_claim_rolled_back
from caravel.store.plans import Plan

__all__ = [
    "LIMIT_HOLD_TIMEOUT",
    "XACT_STATUS",
    "ClaimProgress",
    "bounded_lock",
    "log_rolled_back",
    "tapped",
]


#: Whether the transaction ``xact`` (as :func:`bounded_lock` read it) committed: ``committed``,
#: ``aborted`` or ``in progress``.
XACT_STATUS = sa.text("SELECT pg_xact_status(CAST(:xact AS xid8))")

#: The server's code for a session it ended as idle in its transaction past the timeout.
_IDLE_IN_TRANSACTION_TIMEOUT = "25P03"


def bounded_lock(read: sa.Select[Any], timeout: float) -> sa.Select[Any]:
    """``read`` (the queue's limits row) locked ``FOR UPDATE``, also reading the transaction's
    id (``xact``, as text) and setting its ``idle_in_transaction_session_timeout`` to
    ``timeout`` seconds for the rest of it: one round trip, the claim's first. The setting is a
    condition that is always true, evaluated once, before the row is looked for."""
    limit = sa.func.set_config(
        "idle_in_transaction_session_timeout", f"{round(timeout * 1000)}ms", True
    )
    xact = sa.cast(sa.func.pg_current_xact_id(), sa.Text()).label("xact")
    return (
        read.add_columns(xact)
        .where(sa.select(limit).scalar_subquery().is_not(None))
        .with_for_update()
    )


@dataclass
class ClaimProgress:
    """How far one try of a limited claim got: its transaction's id once its lock statement
    found the limits row, its rows once every statement ran (only the commit was left), and
    whether it failed with its session gone."""

    xact: str | None = None
    rows: list[Any] | None = None
    #: Whether the error that ended the try left its connection broken (the session gone).
    broken: bool = False


def tapped(plan: Plan[list[Any]], progress: ClaimProgress) -> Plan[list[Any]]:
    """``plan``, a limited claim's (whose first statement is :func:`bounded_lock`), noting in
    ``progress`` the transaction id it read and the rows it ends with."""
    rows = yield next(plan)
    if rows:
        progress.xact = rows[0].xact
    try:
        while True:
            rows = yield plan.send(rows)
    except StopIteration as done:
        claimed: list[Any] = done.value
    progress.rows = claimed
    return claimed


def log_rolled_back(queue: str, timeout: float, exc: StoreError) -> None:
    """Say, in one line, that a limited claim of ``queue`` lost its session uncommitted."""
    cause = exc.__cause__
    orig = getattr(cause, "orig", cause)
    timed_out = getattr(orig, "sqlstate", None) == _IDLE_IN_TRANSACTION_TIMEOUT
    log_claim_rolled_back(
        queue, timeout, "idle_in_transaction_timeout" if timed_out else "connection_lost"
    )
