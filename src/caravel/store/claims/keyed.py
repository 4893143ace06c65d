"""The claim of a queue with a per-key concurrency limit (:func:`claim_per_key`)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from caravel.store.claims.sources import (
    KEY_SCAN,
    RUNNING_PART,
    claim_update,
    due_ids,
    no_lock,
    running_part,
)
from caravel.store.values import ClaimSource

__all__ = ["claim_per_key"]


def claim_per_key(source: ClaimSource, target: Any) -> sa.Update:
    """The claim of ``source`` under a per-key limit, bound as :func:`claim` is plus
    ``b_per_key``: up to ``b_limit`` of the first :data:`KEY_SCAN` due jobs of each source, in
    the claim's order, taking a job only while its key's running jobs and the jobs before it of
    the same key stay within ``b_per_key``.

    It runs where limited claims of the queue take turns (:mod:`caravel.store.limited`), so it
    locks no candidate; instead the update itself takes only rows still due at ``b_now``, which
    a concurrent cancel or finish re-checks against on every database."""
    now = sa.bindparam("b_now", type_=sa.BigInteger())
    scan: Any = sa.literal_column(str(KEY_SCAN))
    sources: tuple[ClaimSource, ...] = ("expired", "ready") if source == "any" else (source,)
    parts = [running_part(now)]
    for part, name in enumerate(sources):
        picked = due_ids(name, now, scan, no_lock, keyed=True, partitioned=True)
        inner = picked.subquery(f"{name}_jobs")
        parts.append(
            sa.select(
                inner.c.id, inner.c.key, sa.literal_column(str(part)).label("part"), inner.c.k
            )
        )
    due = sa.union_all(*parts).subquery("due_jobs")
    # Numbered within its key after the key's running jobs (their part sorts first): a job's
    # number is what its key would have running once it and those before it were claimed.
    ranked = sa.select(
        due.c.id,
        due.c.part,
        due.c.k,
        sa.func.row_number()
        .over(partition_by=due.c.key, order_by=(due.c.part, due.c.k))
        .label("n"),
    ).subquery("ranked")
    per_key = sa.bindparam("b_per_key", type_=sa.Integer())
    limit = sa.bindparam("b_limit", type_=sa.Integer(), literal_execute=True)
    chosen = (
        sa.select(ranked.c.id)
        .where(ranked.c.part > sa.literal_column(str(RUNNING_PART)), ranked.c.n <= per_key)
        .order_by(ranked.c.part, ranked.c.k)
        .limit(limit)
    )
    return claim_update(chosen, now, target, still_due=True, takes_over=source != "ready")
