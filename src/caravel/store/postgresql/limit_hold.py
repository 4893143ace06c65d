"""How long a stalled limited claim may keep its queue's limits row locked on PostgreSQL, and
what its worker makes of the session the server ended.

A limited claim locks the queue's row of ``caravel_queue_limits`` (``FOR UPDATE``) for the few
statements of its transaction, so the queue's limited claims take turns. A worker stopped in
that moment (SIGSTOP, a debugger, a frozen VM) or whose link went silent would hold the lock
until its transaction ended, and every other limited claim of the queue would wait. So the
claim's first statement (:func:`hold_bound`) sets ``idle_in_transaction_session_timeout`` for
that transaction only: once the server has waited :data:`LIMIT_HOLD_TIMEOUT` for the claimer's
next statement, it ends the session, which rolls the claim back and releases the lock, and the
next claim in line goes ahead. Nothing the rolled-back claim picked was leased: its jobs are
ready again, unchanged, so no job is lost or run twice, and no limit is exceeded.

A claimer that comes back finds its session gone: the driver reports the server's reason
(SQLSTATE ``25P03``) or, as often, just a connection closed under it. Either way
(:func:`session_lost`), a claim that had not yet asked to commit was rolled back. One that had
(the session went during its COMMIT) is looked up by its transaction id, read by the same first
statement: ``pg_xact_status`` (:data:`XACT_STATUS`) says whether it committed, so its jobs are
either returned as claimed or known to be ready again. The store logs a rolled-back claim in
one line (:func:`log_rolled_back`) and returns an empty batch; the worker's fetcher claims again
from its next step, with a fresh clock (retrying at once would lease jobs from the time read
before the stall).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from caravel.errors import StoreError

__all__ = [
    "LIMIT_HOLD_TIMEOUT",
    "XACT_STATUS",
    "ClaimProgress",
    "hold_bound",
    "log_rolled_back",
    "session_lost",
]

logger = logging.getLogger("caravel.store")

#: Seconds a limited claim's transaction may wait for its claimer's next statement. A claim's
#: own gaps are a network round trip plus the worker's work between statements (choosing among
#: at most 1,000 due jobs): milliseconds. Two seconds leave a wide margin for a slow link, a busy
#: event loop or a garbage collection pause, while bounding how long a stalled claimer holds the
#: queue's other limited claims up.
LIMIT_HOLD_TIMEOUT = 2.0

#: Whether the transaction ``xact`` (as :func:`hold_bound` read it) committed: ``committed``,
#: ``aborted`` or ``in progress``.
XACT_STATUS = sa.text("SELECT pg_xact_status(CAST(:xact AS xid8))")

#: The server's code for a session it ended as idle in its transaction past the timeout.
_IDLE_IN_TRANSACTION_TIMEOUT = "25P03"


def hold_bound() -> sa.Select[Any]:
    """A limited claim's first statement: the timeout (``b_hold``, such as ``'2000ms'``) for
    the rest of the transaction only, and the transaction's id, as text."""
    timeout = sa.func.set_config(
        "idle_in_transaction_session_timeout", sa.bindparam("b_hold", type_=sa.Text()), True
    )
    return sa.select(timeout, sa.cast(sa.func.pg_current_xact_id(), sa.Text()))


@dataclass
class ClaimProgress:
    """How far one try of a limited claim got: its transaction's id once its first statement
    ran, and its rows once every statement did (only the commit was left)."""

    xact: str | None = None
    rows: list[Any] | None = None


def session_lost(exc: StoreError) -> bool:
    """Whether ``exc`` ended the claim's session: the server ended it (as it does past the
    timeout) or the connection went, so the pool discarded it."""
    return bool(getattr(exc.__cause__, "connection_invalidated", False))


def log_rolled_back(queue: str, timeout: float, exc: StoreError) -> None:
    """Say, in one line, that a limited claim of ``queue`` lost its session uncommitted."""
    orig = getattr(exc.__cause__, "orig", None)
    timed_out = getattr(orig, "sqlstate", None) == _IDLE_IN_TRANSACTION_TIMEOUT
    logger.warning(
        "limited claim rolled back: its database session ended before it committed (the server"
        " ends a claim that stalls over %gs holding its queue's limits row); nothing was claimed,"
        " claiming again",
        timeout,
        extra={
            "queue": queue,
            "operation": "job_claim",
            "reason": "idle_in_transaction_timeout" if timed_out else "connection_lost",
        },
    )
