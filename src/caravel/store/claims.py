"""The claim: which jobs a worker takes, in which order, as one portable statement per source
of jobs, and the ``"any"`` source as the two bounded claims it is made of.

Ready jobs are taken in ascending :data:`~caravel.store.schema.claim_rank` (the due time moved
earlier by ``PRIORITY_AGING_MS`` per point of priority), read from ``ix_caravel_jobs_ranked``;
running jobs whose lease expired in order of expiry, from ``ix_caravel_jobs_leases``. Each claim
reads at most its batch from one index, never every due row."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import sqlalchemy as sa

from caravel.jobs import FailureCategory, JobState
from caravel.limits import MAX_PRIORITY, PRIORITY_AGING_MS
from caravel.store.rows import CLAIM_RETURNING
from caravel.store.schema import claim_rank, jobs
from caravel.store.values import ClaimBatch, ClaimRequest, ClaimSource

__all__ = ["RANK_HORIZON_MS", "claim", "claim_by_source"]

RUNNING = JobState.RUNNING.value
READY = JobState.READY.value
DEAD = JobState.DEAD_LETTER.value

#: How far past now the rank of a due job can lie (a due job of the lowest priority): the claim
#: stops reading the index there, so a queue of far-future delayed jobs is not read to its end.
RANK_HORIZON_MS = MAX_PRIORITY * PRIORITY_AGING_MS


def claim(source: ClaimSource, target: Any, *, literal_limit: bool = True) -> sa.Update:
    """The claim of ``"ready"`` or ``"expired"`` jobs (``"any"`` is two claims, see
    :func:`claim_by_source`), bound as ``b_queue``, ``b_now``, ``b_expires`` and ``b_limit``.
    ``target(candidates)`` is the dialect's condition for the rows the candidates pick;
    ``literal_limit`` writes the batch size into the SQL text instead of binding it."""
    now = sa.bindparam("b_now", type_=sa.BigInteger())
    expires = sa.bindparam("b_expires", type_=sa.BigInteger())
    candidates = sa.select(jobs.c.id).where(
        jobs.c.queue == sa.bindparam("b_queue"), jobs.c.available_at <= now
    )
    # The state as literal SQL, so the planner can match the partial indexes.
    if source == "ready":
        candidates = candidates.where(
            jobs.c.state == sa.literal_column(f"'{READY}'"),
            claim_rank <= now + sa.literal_column(str(RANK_HORIZON_MS)),
        ).order_by(claim_rank)
    elif source == "expired":
        candidates = candidates.where(jobs.c.state == sa.literal_column(f"'{RUNNING}'")).order_by(
            jobs.c.available_at
        )
    else:
        raise ValueError(f"one claim statement per source: {source!r}")
    candidates = candidates.limit(
        sa.bindparam("b_limit", type_=sa.Integer(), literal_execute=literal_limit)
    )
    exhausted = sa.and_(jobs.c.state == RUNNING, jobs.c.attempt >= jobs.c.max_attempts)

    def pick(if_exhausted: Any, otherwise: Any) -> sa.Case[Any]:
        return sa.case((exhausted, if_exhausted), else_=otherwise)

    return (
        sa.update(jobs)
        .where(target(candidates))
        .values(
            state=pick(DEAD, RUNNING),
            attempt=pick(jobs.c.attempt, jobs.c.attempt + 1),
            lease_token=jobs.c.lease_token + 1,
            lease_expires_at=pick(sa.null(), expires),
            available_at=pick(sa.null(), expires),
            started_at=pick(jobs.c.started_at, now),
            finished_at=pick(now, sa.null()),
            last_failure=pick(FailureCategory.LEASE_EXPIRED.value, jobs.c.last_failure),
            updated_at=now,
        )
        .returning(*CLAIM_RETURNING)
    )


async def claim_by_source(
    claim_one: Callable[[ClaimRequest], Awaitable[ClaimBatch]], request: ClaimRequest
) -> ClaimBatch:
    """``request`` through ``claim_one`` (a store's claim of one source). ``"any"`` is two
    bounded claims: expired leases first (a crashed worker's jobs have waited longest), then
    ready jobs by rank for what the batch has left. One statement over both would have to sort
    every due row of the queue, since no one index holds both orders."""
    if request.source != "any":
        return await claim_one(request)
    expired = await claim_one(replace(request, source="expired"))
    left = request.limit - len(expired.claimed) - expired.dead_lettered
    if left <= 0:
        return expired
    ready = await claim_one(replace(request, source="ready", limit=left))
    return ClaimBatch(
        claimed=expired.claimed + ready.claimed,
        dead_lettered=expired.dead_lettered + ready.dead_lettered,
    )
