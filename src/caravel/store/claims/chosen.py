"""What a claim under a rate limit reads and writes (:mod:`caravel.store.limited.claim`): each
key's running jobs, the due jobs with their keys and weights, and the claim of the jobs
:func:`caravel.flow.window.fit` chose."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from caravel.store.claims.sources import RUNNING, claim_update, due_ids, no_lock
from caravel.store.schema import jobs, partition
from caravel.store.values import ClaimSource

__all__ = ["claim_ids", "due_weighed", "running_by_key"]


def running_by_key() -> sa.Select[Any]:
    """How many of ``b_queue``'s jobs run with a lease unexpired at ``b_now``, per partition
    key (columns ``key``, ``running``)."""
    now = sa.bindparam("b_now", type_=sa.BigInteger())
    running: Any = sa.func.count().label("running")
    return (
        sa.select(partition.label("key"), running)
        .where(
            jobs.c.queue == sa.bindparam("b_queue"),
            jobs.c.state == sa.literal_column(f"'{RUNNING}'"),
            jobs.c.available_at > now,
        )
        .group_by(partition)
    )


def due_weighed(source: ClaimSource) -> list[sa.Select[Any]]:
    """The first ``b_scan`` due jobs no heavier than ``b_fits`` of each of ``source``'s
    sources, bound as :func:`claim` is, one select per source in claim order (columns ``id``,
    ``key``, ``weight``, ``part``: the source's position among ``source``'s, and ``k``: the
    claim order within it): what a claim under a rate limit chooses from
    (:func:`caravel.flow.window.fit`). It runs where the queue's limited claims take turns, so
    it locks nothing."""
    now = sa.bindparam("b_now", type_=sa.BigInteger())
    scan = sa.bindparam("b_scan", type_=sa.Integer(), literal_execute=True)
    fits = sa.bindparam("b_fits", type_=sa.BigInteger())
    sources: tuple[ClaimSource, ...] = ("expired", "ready") if source == "any" else (source,)
    parts = []
    for part, name in enumerate(sources):
        picked = due_ids(name, now, scan, no_lock, keyed=True, partitioned=True, fits=fits)
        inner = picked.subquery(f"{name}_jobs")
        parts.append(
            sa.select(
                inner.c.id,
                inner.c.key,
                inner.c.weight,
                sa.literal_column(str(part)).label("part"),
                inner.c.k,
            )
        )
    return parts


def claim_ids(source: ClaimSource) -> sa.Update:
    """The claim of the jobs ``b_ids`` names (chosen by a limited claim of ``source``), bound
    as :func:`claim` is otherwise; as :func:`claim_per_key`, it takes only those still due."""
    now = sa.bindparam("b_now", type_=sa.BigInteger())
    chosen = jobs.c.id.in_(sa.bindparam("b_ids", expanding=True))
    return claim_update(
        sa.select(jobs.c.id), now, lambda _: chosen, still_due=True, takes_over=source != "ready"
    )
