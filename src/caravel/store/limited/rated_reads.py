"""Everything a claim of a rate-limited queue reads before it chooses, in one statement
(:func:`rated_reads`), so the claim's turn costs one round trip for them instead of four.

Its rows come in four kinds (column ``kind``), in this order:

- :data:`BOUNDS`, one row: the queue's latest logged start (``k``) and its oldest (``n``),
  both ``NULL`` when none is logged;
- :data:`STARTED`: the weights (``n``) each key (``key``) started within the window, which ends
  at the window clock (:func:`caravel.flow.window.window_clock`, computed here from the latest
  start) and is ``b_period`` long;
- :data:`RUNNING_BY_KEY`: how many jobs (``n``) of each key run with a lease unexpired at
  ``b_now``, the claim's own clock (or all of them under the key ``''``, or no row: see
  :data:`RunningCount`);
- :data:`DUE`: the due candidates in claim order (``id``, ``key``, ``weight``, ``part``, ``k``),
  as :func:`caravel.store.claims.due_weighed` reads them.
"""

from __future__ import annotations

from typing import Any, Literal

import sqlalchemy as sa

from caravel.store import claims
from caravel.store.claims.chosen import running_by_key
from caravel.store.schema import jobs, queue_starts
from caravel.store.values import ClaimSource

__all__ = ["BOUNDS", "DUE", "RUNNING_BY_KEY", "STARTED", "RunningCount", "rated_reads"]

BOUNDS, STARTED, RUNNING_BY_KEY, DUE = 0, 1, 2, 3


#: How a rated claim counts the running jobs: per partition key (a per-key cap or fair
#: dispatch needs them), all together under the key ``''`` (a queue-wide cap alone), or not at
#: all (a rate alone).
RunningCount = Literal["by_key", "total", "none"]

_COLUMNS = ("kind", "id", "key", "weight", "part", "k", "n")


def _kind(kind: int) -> Any:
    return sa.literal_column(str(kind))


def rated_reads(source: ClaimSource, running: RunningCount) -> sa.Select[Any]:
    """The reads of a rated claim of ``source`` (see the module docstring), bound as
    :func:`~caravel.store.claims.due_weighed` is plus ``b_period`` (the rate's, in ms), with
    the running jobs counted as ``running`` says."""
    now = sa.bindparam("b_now", type_=sa.BigInteger())
    period = sa.bindparam("b_period", type_=sa.BigInteger())
    of_queue = queue_starts.c.queue == sa.bindparam("b_queue")
    # Each one entry of ix_caravel_queue_starts_window, read from its end (an aggregate would
    # read every entry of the queue where the planner has no statistics to tell it otherwise).
    at = queue_starts.c.started_at
    latest = sa.select(at).where(of_queue).order_by(at.desc()).limit(1).scalar_subquery()
    oldest = sa.select(at).where(of_queue).order_by(at).limit(1).scalar_subquery()
    # The window clock: the claim's own, or the latest logged start if that is later.
    since = sa.case((latest > now, latest), else_=now) - period

    def row(kind: int, id_: Any, key: Any, weight: Any, part: Any, k: Any, n: Any) -> Any:
        # Each column labelled: a select lists one NULL expression used twice only once.
        values = (_kind(kind), id_, key, weight, part, k, n)
        return [value.label(name) for value, name in zip(values, _COLUMNS, strict=True)]

    def null(type_: Any) -> Any:
        return sa.cast(sa.null(), type_)

    bigint = sa.BigInteger()
    bounds = sa.select(
        *row(
            BOUNDS,
            null(jobs.c.id.type),
            null(queue_starts.c.key.type),
            null(bigint),
            null(bigint),
            latest,
            oldest,
        )
    )
    started = (
        sa.select(
            *row(
                STARTED,
                null(jobs.c.id.type),
                queue_starts.c.key,
                null(bigint),
                null(bigint),
                null(bigint),
                sa.func.sum(queue_starts.c.weight),
            )
        )
        .where(of_queue, queue_starts.c.started_at > since)
        .group_by(queue_starts.c.key)
    )
    counted: list[sa.Select[Any]] = []
    if running != "none":
        key: Any
        n: Any
        if running == "total":
            total = claims.running_count().subquery("running_total")
            key, n = sa.cast(sa.literal(""), queue_starts.c.key.type), total.c[0]
        else:
            by_key = running_by_key().subquery("running_keys")
            key, n = by_key.c.key, by_key.c.running
        parts = (null(jobs.c.id.type), key, null(bigint), null(bigint), null(bigint), n)
        counted.append(sa.select(*row(RUNNING_BY_KEY, *parts)))
    due = [
        sa.select(
            *row(DUE, part.c.id, part.c.key, part.c.weight, part.c.part, part.c.k, null(bigint))
        )
        for part in (select.subquery() for select in claims.due_weighed(source))
    ]
    # Already in the order asked for, so a sort that does not keep ties (PostgreSQL's) leaves
    # jobs of equal rank in their scan's order. The first select types the columns for
    # SQLAlchemy: its NULLs are cast.
    every = sa.union_all(bounds, started, *counted, *due).subquery("rated_reads")
    named = [every.c[name] for name in _COLUMNS]
    return sa.select(*named).order_by(every.c.kind, every.c.part, every.c.k)
