"""How long a stalled limited claim may hold its queue's limits row, on the databases whose
server can end the stalled session (PostgreSQL: :mod:`caravel.store.postgresql.limit_hold`;
MariaDB: :mod:`caravel.store.mariadb.limit_hold`), and the one line a worker logs when its claim
was rolled back that way."""

from __future__ import annotations

import logging

__all__ = ["LIMIT_HOLD_TIMEOUT", "log_claim_rolled_back"]

logger = logging.getLogger("caravel.store")

#: Seconds a limited claim's transaction may wait for its claimer's next statement. A claim's
#: own gaps are a network round trip plus the worker's work between statements (choosing among
#: at most 1,000 due jobs): milliseconds. Two seconds leave a wide margin for a slow link, a busy
#: event loop or a garbage collection pause, while bounding how long a stalled claimer holds the
#: queue's other limited claims up.
LIMIT_HOLD_TIMEOUT = 2.0


def log_claim_rolled_back(queue: str, timeout: float, reason: str) -> None:
    """Say, in one line, that a limited claim of ``queue`` lost its session uncommitted;
    ``reason`` is ``idle_in_transaction_timeout`` where the server said why, else
    ``connection_lost``."""
    logger.warning(
        "limited claim rolled back: its database session ended before it committed (the server"
        " ends a claim that stalls over %gs holding its queue's limits row); nothing was claimed,"
        " claiming again",
        timeout,
        extra={"queue": queue, "operation": "job_claim", "reason": reason},
    )
