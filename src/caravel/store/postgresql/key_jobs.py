"""How a fair claim reads each partition key's first jobs on PostgreSQL
(:data:`~caravel.store.claims.KeyJobs`): a ``LATERAL`` subquery, one bounded index scan per
key, where the portable form (:func:`~caravel.store.claims.in_key_jobs`) needs a correlated
``IN`` and a second look-up by primary key."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from caravel.store.schema import jobs

__all__ = ["lateral_key_jobs"]


def lateral_key_jobs(keys: Any, first: Callable[[Any, Any], sa.Select[Any]]) -> sa.Select[Any]:
    """Each of ``keys``' first jobs (``id``, ``k``, ``key``), read through ``LATERAL``."""
    picked = first(jobs, keys.c.key).lateral("key_jobs")
    return sa.select(picked.c.id, picked.c.k, keys.c.key).select_from(keys.join(picked, sa.true()))
