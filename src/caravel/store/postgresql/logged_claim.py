"""A rated claim that logs its starts in its own statement (PostgreSQL's data-modifying
``WITH``): the claim's ``UPDATE`` and the ``INSERT`` into ``caravel_queue_starts`` go to the
server as one statement, so a claim of a queue with a rate costs one round trip fewer than the
dialects that log them with a statement of their own (:mod:`caravel.store.limited.claim`)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from caravel.jobs import JobState
from caravel.store.rows import CLAIM_RETURNING
from caravel.store.schema import jobs, partition, queue_starts

__all__ = ["claim_logging_starts"]

RUNNING = JobState.RUNNING.value


def claim_logging_starts(claim: sa.Update) -> sa.Select[Any]:
    """``claim`` (a rated claim's ``UPDATE``, bound with ``b_queue`` and ``b_now``) that also
    logs one start per partition key of the jobs it made running, at ``b_now``, weighing their
    summed weights (as :func:`caravel.flow.window.started_weights` sums them); returns what
    ``claim`` returns."""
    claimed = claim.returning(
        partition.label("start_key"), sa.func.coalesce(jobs.c.weight, 1).label("start_weight")
    ).cte("claimed")
    started = (
        sa.select(
            sa.bindparam("b_queue", type_=queue_starts.c.queue.type),
            claimed.c.start_key,
            sa.bindparam("b_now", type_=sa.BigInteger()),
            sa.func.sum(claimed.c.start_weight),
        )
        .where(claimed.c.state == sa.literal_column(f"'{RUNNING}'"))
        .group_by(claimed.c.start_key)
    )
    logged = (
        sa.insert(queue_starts)
        .from_select(["queue", "key", "started_at", "weight"], started)
        .cte("logged")
    )
    return sa.select(*(claimed.c[column.name] for column in CLAIM_RETURNING)).add_cte(logged)
