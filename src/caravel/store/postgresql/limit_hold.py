"""How long a stalled limited claim may keep its queue's limits row locked on PostgreSQL.

A limited claim locks the queue's row of ``caravel_queue_limits`` (``FOR UPDATE``) for the few
statements of its transaction, so the queue's limited claims take turns. A worker stopped in
that moment (SIGSTOP, a debugger, a frozen VM) or whose link went silent would hold the lock
until its transaction ended, and every other limited claim of the queue would wait. So the
statement that takes the lock also sets ``idle_in_transaction_session_timeout`` for the rest of
that transaction only: once the server has waited :data:`LIMIT_HOLD_TIMEOUT` for the claimer's
next statement, it ends that session, which rolls the claim back and releases the lock, and the
next claim in line goes ahead. Nothing the rolled-back claim picked was leased: its jobs are
ready again, unchanged, so no job is lost or run twice, and no limit is exceeded.

A claimer that comes back finds its session gone (SQLSTATE ``25P03``): its claim took nothing,
which :func:`stalled` recognises, and the store logs one line and returns an empty batch. The
worker's fetcher claims again from its next step, with a fresh clock (retrying at once would
lease jobs from the time read before the stall).
"""

from __future__ import annotations

import logging
from typing import Any

import sqlalchemy as sa

__all__ = ["LIMIT_HOLD_TIMEOUT", "bounded_lock", "log_rolled_back", "stalled"]

logger = logging.getLogger("caravel.store")

#: Seconds a limited claim's transaction may wait for its claimer's next statement while it
#: holds the queue's limits row. A claim's own gaps are a network round trip plus the worker's
#: work between statements (choosing among at most 1,000 due jobs): milliseconds. Two seconds
#: leave a wide margin for a slow link, a busy event loop or a garbage collection pause, while
#: bounding how long a stalled claimer holds the queue's other limited claims up.
LIMIT_HOLD_TIMEOUT = 2.0

#: The server's code for a session it ended as idle in its transaction past the timeout.
_IDLE_IN_TRANSACTION_TIMEOUT = "25P03"


def bounded_lock(read: sa.Select[Any], timeout: float) -> sa.Select[Any]:
    """``read`` locking its row ``FOR UPDATE``, and setting the transaction's
    ``idle_in_transaction_session_timeout`` to ``timeout`` seconds in the same round trip (a
    condition that is always true, evaluated once per statement)."""
    limit = sa.func.set_config(
        "idle_in_transaction_session_timeout", f"{round(timeout * 1000)}ms", True
    )
    return read.where(sa.select(limit).scalar_subquery().is_not(None)).with_for_update()


def stalled(exc: BaseException) -> bool:
    """Whether ``exc`` (a translated error, its cause, or the driver's) says the server ended
    the session because its transaction sat idle past the timeout: the transaction was rolled
    back, so nothing in it happened."""
    for found in (exc, exc.__cause__, getattr(exc.__cause__, "orig", None)):
        if getattr(found, "sqlstate", None) == _IDLE_IN_TRANSACTION_TIMEOUT:
            return True
    return False


def log_rolled_back(queue: str, timeout: float) -> None:
    """Say, in one line, that a limited claim of ``queue`` was rolled back by the server."""
    logger.warning(
        "a limited claim stalled for over %gs holding its queue's limits row; the server ended "
        "its session and rolled it back (nothing was claimed); claiming again",
        timeout,
        extra={"queue": queue, "operation": "job_claim", "reason": "idle_in_transaction_timeout"},
    )
