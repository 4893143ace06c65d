"""How a fair claim reads each partition key's first jobs on MariaDB
(:data:`~caravel.store.claims.KeyJobs`). MariaDB has neither ``LATERAL`` nor a ``LIMIT`` in a
correlated subquery, so each key's jobs are numbered in claim order by a window and the first
``share`` of each are kept: the same jobs, read from the keys' ready rows in one pass."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from caravel.store.schema import jobs

__all__ = ["numbered_key_jobs"]


def numbered_key_jobs(keys: Any, first: Callable[[Any, Any], sa.Select[Any]]) -> sa.Select[Any]:
    """Each of ``keys``' first jobs (``id``, ``k``, ``key``): ``first(table, key)``'s jobs of
    each key, its ``LIMIT`` applied per key by numbering them."""
    found = jobs.alias("key_jobs")
    one_key = first(found, keys.c.key)
    share = one_key._limit_clause
    numbered = (
        sa.select(
            found.c.id,
            one_key.selected_columns.k,
            keys.c.key,
            sa.func.row_number()
            .over(partition_by=keys.c.key, order_by=one_key._order_by_clauses)
            .label("n"),
        )
        .select_from(keys.join(found, sa.and_(*one_key._where_criteria)))
        .subquery("numbered_jobs")
    )
    return sa.select(numbered.c.id, numbered.c.k, numbered.c.key).where(numbered.c.n <= share)
