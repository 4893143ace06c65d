"""The claim of a queue without limits (:func:`claim`), and the count of a queue's running jobs
a limited claim starts from (:func:`running_count`)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from caravel.store.claims.sources import RUNNING, Lock, claim_update, due_ids
from caravel.store.schema import jobs
from caravel.store.values import ClaimSource

__all__ = ["claim", "running_count"]


def _candidates(
    source: ClaimSource, now: Any, limit: Any, lock: Lock, *, unlimited: bool
) -> sa.Select[Any]:
    if source != "any":
        return due_ids(source, now, limit, lock, unlimited=unlimited)
    parts = []
    sources: tuple[ClaimSource, ...] = ("expired", "ready")
    for part, name in enumerate(sources):
        one = due_ids(name, now, limit, lock, keyed=True, unlimited=unlimited)
        picked = one.subquery(f"{name}_jobs")
        parts.append(sa.select(picked.c.id, sa.literal_column(str(part)).label("part"), picked.c.k))
    both = sa.union_all(*parts).subquery("due_jobs")
    return sa.select(both.c.id).order_by(both.c.part, both.c.k).limit(limit)


def claim(
    source: ClaimSource,
    target: Any,
    lock: Lock,
    *,
    literal_limit: bool = True,
    unlimited: bool = True,
) -> sa.Update:
    """The claim of ``source``, bound as ``b_queue``, ``b_now``, ``b_expires`` and ``b_limit``,
    of a queue without limits: while the queue has a limits row it claims nothing, so a worker
    that has not read a limit yet cannot take the queue past it (it reads the limits again
    within one ``poll_interval``, and its claims are limited from then on). Without
    ``unlimited``, the same claim with no such check: the limited claim's, for a queue whose
    row holds no cap it needs another statement for.
    ``lock(select)`` is the dialect's locking of the rows one source picks, ``target(ids)`` its
    condition for the rows the picked ids name; ``literal_limit`` writes the batch size into
    the SQL text instead of binding it."""
    now = sa.bindparam("b_now", type_=sa.BigInteger())
    limit = sa.bindparam("b_limit", type_=sa.Integer(), literal_execute=literal_limit)
    candidates = _candidates(source, now, limit, lock, unlimited=unlimited)
    return claim_update(candidates, now, target, still_due=False)


def running_count() -> sa.Select[Any]:
    """How many of ``b_queue``'s jobs run with a lease unexpired at ``b_now`` (a running job's
    ``available_at`` is its lease's expiry), read from ``ix_caravel_jobs_leases``."""
    now = sa.bindparam("b_now", type_=sa.BigInteger())
    return sa.select(sa.func.count()).where(
        jobs.c.queue == sa.bindparam("b_queue"),
        jobs.c.state == sa.literal_column(f"'{RUNNING}'"),
        jobs.c.available_at > now,
    )
