"""The pieces every claim statement is built of: the due jobs of one source in its order
(:func:`due_ids`), each key's running jobs (:func:`running_per_key`), and the ``UPDATE`` that
claims the chosen rows (:func:`claim_update`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from caravel.jobs import FailureCategory, JobState
from caravel.limits import MAX_PRIORITY, PRIORITY_AGING_MS
from caravel.store.rows import CLAIM_RETURNING
from caravel.store.schema import claim_rank, jobs, partition, queue_limits
from caravel.store.values import ClaimSource

__all__ = [
    "KEY_SCAN",
    "RANK_HORIZON_MS",
    "Lock",
    "claim_update",
    "due_ids",
    "no_lock",
    "running_per_key",
]

RUNNING = JobState.RUNNING.value
READY = JobState.READY.value
DEAD = JobState.DEAD_LETTER.value

#: How far past now the rank of a due job can lie (a due job of the lowest priority): the claim
#: stops reading the index there, so a queue of far-future delayed jobs is not read to its end.
RANK_HORIZON_MS = MAX_PRIORITY * PRIORITY_AGING_MS

#: How many due jobs of each source a claim under a per-key limit reads at most: the horizon
#: within which a key at its limit cannot hold back the keys behind it.
KEY_SCAN = 1000

#: The dialect's locking of the rows one source picks.
Lock = Callable[[sa.Select[Any]], sa.Select[Any]]


def no_lock(picked: sa.Select[Any]) -> sa.Select[Any]:
    """:data:`Lock` for a claim that runs where the queue's limited claims take turns."""
    return picked


def due_ids(
    source: ClaimSource,
    now: Any,
    limit: Any,
    lock: Lock,
    *,
    keyed: bool = False,
    partitioned: bool = False,
    unlimited: bool = False,
) -> sa.Select[Any]:
    """The ids of up to ``limit`` jobs of one source, in its order (with that order's key as
    ``k`` when ``keyed``, and the partition key as ``key`` when ``partitioned``), locked the
    dialect's way; with ``unlimited``, none while ``b_queue`` has a limits row. The state is
    literal SQL, so the planner can match the partial indexes."""
    due: tuple[sa.ColumnElement[bool], ...] = (
        jobs.c.queue == sa.bindparam("b_queue"),
        jobs.c.available_at <= now,
    )
    if unlimited:
        due = (*due, ~sa.exists().where(queue_limits.c.queue == sa.bindparam("b_queue")))
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
    columns: tuple[Any, ...] = (jobs.c.id, order.label("k")) if keyed else (jobs.c.id,)
    if partitioned:
        columns = (*columns, partition.label("key"))
    return lock(sa.select(*columns).where(*due, *where).order_by(order).limit(limit))


def running_per_key(now: Any) -> sa.CTE:
    """Each key's jobs of ``b_queue`` running with a lease unexpired at ``now``, as
    ``running_keys(key, running)``: a ``MATERIALIZED`` common table expression, counted once
    per claim (as a subquery, a planner without statistics regrouped it once per candidate)."""
    return (
        sa.select(partition.label("key"), sa.func.count().label("running"))
        .where(
            jobs.c.queue == sa.bindparam("b_queue"),
            jobs.c.state == sa.literal_column(f"'{RUNNING}'"),
            jobs.c.available_at > now,
        )
        .group_by(partition)
        .cte("running_keys")
        .prefix_with("MATERIALIZED")
    )


def claim_update(
    candidates: sa.Select[Any], now: Any, target: Any, *, still_due: bool
) -> sa.Update:
    """The ``UPDATE`` claiming the rows ``target(candidates)`` names (with ``still_due``, only
    those still due at ``now``): each becomes running under a new lease and token, or, when its
    last attempt's lease expired, is dead-lettered; returns :data:`CLAIM_RETURNING`."""
    expires = sa.bindparam("b_expires", type_=sa.BigInteger())
    exhausted = sa.and_(jobs.c.state == RUNNING, jobs.c.attempt >= jobs.c.max_attempts)

    def pick(if_exhausted: Any, otherwise: Any) -> sa.Case[Any]:
        return sa.case((exhausted, if_exhausted), else_=otherwise)

    where = [target(candidates)]
    if still_due:
        # Ready and due, or running with an expired lease: nothing else has available_at <= now.
        where.append(jobs.c.available_at <= now)
    return (
        sa.update(jobs)
        .where(*where)
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
