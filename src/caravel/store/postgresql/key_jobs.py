"""How a fair claim reads each partition key's first jobs on PostgreSQL
(:data:`~caravel.store.claims.KeyJobs`): a ``LATERAL`` subquery, one bounded index scan per
key, where the portable form (:func:`~caravel.store.claims.in_key_jobs`) needs a correlated
``IN`` and a second look-up by primary key."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from caravel.store.schema import jobs, partition

__all__ = ["lateral_key_jobs"]


def lateral_key_jobs(keys: Any, first: Callable[[Any, Any], sa.Select[Any]]) -> sa.Select[Any]:
    """Each of ``keys``' first jobs (``id``, ``k``, ``key``), read through ``LATERAL``, ordered
    by the key first (equal throughout, so the same jobs): the order ``ix_caravel_jobs_fair``
    holds, so a planner without statistics reads each key there, not through the rank index."""
    read = first(jobs, keys.c.key)
    read = read.order_by(None).order_by(partition, read.selected_columns.k)
    picked = read.lateral("key_jobs")
    return sa.select(picked.c.id, picked.c.k, keys.c.key).select_from(keys.join(picked, sa.true()))
