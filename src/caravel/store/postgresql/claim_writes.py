"""Limited claims that write their bookkeeping in their own statement (PostgreSQL's
data-modifying ``WITH``): a rated claim's log of starts (:func:`claim_logging_starts`) and a
fair claim's cursor (:func:`claim_moving_cursor`) go to the server with the claim's ``UPDATE``,
so each costs one round trip fewer than on the dialects that write them with a statement of
their own (:mod:`caravel.store.limited.claim`)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from caravel.jobs import JobState
from caravel.store.rows import CLAIM_RETURNING
from caravel.store.schema import jobs, partition, queue_limits, queue_starts

__all__ = ["claim_logging_starts", "claim_moving_cursor"]

RUNNING = JobState.RUNNING.value


def _claimed(claim: sa.Update, *extra: Any) -> tuple[sa.CTE, Any]:
    """``claim`` returning ``extra`` too, as a ``WITH`` part, and whether each row it returns
    is now running."""
    claimed = claim.returning(*extra).cte("claimed")
    return claimed, claimed.c.state == sa.literal_column(f"'{RUNNING}'")


def _as_claimed(claimed: sa.CTE, write: sa.CTE) -> sa.Select[Any]:
    return sa.select(*(claimed.c[column.name] for column in CLAIM_RETURNING)).add_cte(write)


def claim_logging_starts(claim: sa.Update) -> sa.Select[Any]:
    """``claim`` (a rated claim's ``UPDATE``, bound with ``b_queue`` and ``b_now``) that also
    logs one start per partition key of the jobs it made running, at ``b_now``, weighing their
    summed weights (as :func:`caravel.flow.window.started_weights` sums them); returns what
    ``claim`` returns."""
    claimed, running = _claimed(
        claim,
        partition.label("start_key"),
        sa.func.coalesce(jobs.c.weight, 1).label("start_weight"),
    )
    started = (
        sa.select(
            sa.bindparam("b_queue", type_=queue_starts.c.queue.type),
            claimed.c.start_key,
            sa.bindparam("b_now", type_=sa.BigInteger()),
            sa.func.sum(claimed.c.start_weight),
        )
        .where(running)
        .group_by(claimed.c.start_key)
    )
    logged = (
        sa.insert(queue_starts)
        .from_select(["queue", "key", "started_at", "weight"], started)
        .cte("logged")
    )
    return _as_claimed(claimed, logged)


def claim_moving_cursor(claim: sa.Update) -> sa.Select[Any]:
    """``claim`` (a fair claim's ``UPDATE``, bound with ``b_queue`` and ``b_cursor``, ``''``
    for none) that also moves the queue's fair cursor as
    :func:`caravel.flow.fairness.next_cursor` does: to the greatest key it served at or before
    the cursor, or else the greatest it served; unchanged when it served none. Returns what
    ``claim`` returns."""
    claimed, running = _claimed(claim, partition.label("served_key"))
    cursor = sa.bindparam("b_cursor", type_=sa.String())
    served = claimed.c.served_key
    wrapped = sa.func.max(sa.case((served <= cursor, served)))
    moved = (
        sa.select(sa.func.coalesce(wrapped, sa.func.max(served))).where(running).scalar_subquery()
    )
    move = (
        sa.update(queue_limits)
        .where(
            queue_limits.c.queue == sa.bindparam("b_queue", type_=queue_limits.c.queue.type),
            moved.is_not(None),
            queue_limits.c.fair_cursor.is_distinct_from(moved),
        )
        .values(fair_cursor=moved)
        .cte("moved")
    )
    return _as_claimed(claimed, move)
