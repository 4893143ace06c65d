"""The claim: which jobs a worker takes and in which order, as one portable statement per source
of jobs (see :data:`~caravel.store.values.ClaimSource`).

Ready jobs are taken in ascending :data:`~caravel.store.schema.claim_rank` (the due time moved
earlier by ``PRIORITY_AGING_MS`` per point of priority), read from ``ix_caravel_jobs_ranked``;
running jobs whose lease expired in order of expiry, from ``ix_caravel_jobs_leases``. No one
index holds both orders, so ``"any"`` is the two bounded reads side by side: up to the batch
of each, expired leases first, and the batch taken from those (at most twice the batch sorted,
never every due row)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from caravel.jobs import FailureCategory, JobState
from caravel.limits import MAX_PRIORITY, PRIORITY_AGING_MS
from caravel.store.rows import CLAIM_RETURNING
from caravel.store.schema import claim_rank, jobs
from caravel.store.values import ClaimSource

__all__ = ["RANK_HORIZON_MS", "claim"]

RUNNING = JobState.RUNNING.value
READY = JobState.READY.value
DEAD = JobState.DEAD_LETTER.value

#: How far past now the rank of a due job can lie (a due job of the lowest priority): the claim
#: stops reading the index there, so a queue of far-future delayed jobs is not read to its end.
RANK_HORIZON_MS = MAX_PRIORITY * PRIORITY_AGING_MS

Lock = Callable[[sa.Select[Any]], sa.Select[Any]]


def _source(
    source: ClaimSource, now: Any, limit: Any, lock: Lock, *, keyed: bool = False
) -> sa.Select[Any]:
    """The ids of up to ``limit`` jobs of one source, in its order (with that order's key as
    ``k`` when ``keyed``), locked the dialect's way. The state is literal SQL, so the planner
    can match the partial indexes."""
    due = (jobs.c.queue == sa.bindparam("b_queue"), jobs.c.available_at <= now)
    where: tuple[sa.ColumnElement[bool], ...]
    if source == "ready":
        where = (
            jobs.c.state == sa.literal_column(f"'{READY}'"),
            claim_rank <= now + sa.literal_column(str(RANK_HORIZON_MS)),
        )
        order: Any = claim_rank
    else:
        where = (jobs.c.state == sa.literal_column(f"'{RUNNING}'"),)
        order = jobs.c.available_at
    columns = (jobs.c.id, order.label("k")) if keyed else (jobs.c.id,)
    return lock(sa.select(*columns).where(*due, *where).order_by(order).limit(limit))


def _candidates(source: ClaimSource, now: Any, limit: Any, lock: Lock) -> sa.Select[Any]:
    if source != "any":
        return _source(source, now, limit, lock)
    parts = []
    sources: tuple[ClaimSource, ...] = ("expired", "ready")
    for part, name in enumerate(sources):
        picked = _source(name, now, limit, lock, keyed=True).subquery(f"{name}_jobs")
        parts.append(sa.select(picked.c.id, sa.literal_column(str(part)).label("part"), picked.c.k))
    both = sa.union_all(*parts).subquery("due_jobs")
    return sa.select(both.c.id).order_by(both.c.part, both.c.k).limit(limit)


def claim(source: ClaimSource, target: Any, lock: Lock, *, literal_limit: bool = True) -> sa.Update:
    """The claim of ``source``, bound as ``b_queue``, ``b_now``, ``b_expires`` and ``b_limit``.
    ``lock(select)`` is the dialect's locking of the rows one source picks, ``target(ids)`` its
    condition for the rows the picked ids name; ``literal_limit`` writes the batch size into
    the SQL text instead of binding it."""
    now = sa.bindparam("b_now", type_=sa.BigInteger())
    expires = sa.bindparam("b_expires", type_=sa.BigInteger())
    limit = sa.bindparam("b_limit", type_=sa.Integer(), literal_execute=literal_limit)
    candidates = _candidates(source, now, limit, lock)
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
