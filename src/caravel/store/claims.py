"""The claim: which jobs a worker takes and in which order, as one portable statement per source
of jobs (see :data:`~caravel.store.values.ClaimSource`).

Ready jobs are taken in ascending :data:`~caravel.store.schema.claim_rank` (the due time moved
earlier by ``PRIORITY_AGING_MS`` per point of priority), read from ``ix_caravel_jobs_ranked``;
running jobs whose lease expired in order of expiry, from ``ix_caravel_jobs_leases``. No one
index holds both orders, so ``"any"`` is the two bounded reads side by side: up to the batch
of each, expired leases first, and the batch taken from those (at most twice the batch sorted,
never every due row).

A claim of a queue with a per-key concurrency limit (:func:`claim_per_key`) reads the first
:data:`KEY_SCAN` due jobs of each source instead, numbers them per partition key, and takes a job
only while its key's running jobs plus those numbered before it stay within the limit: still one
bounded statement, and a key at its limit cannot hold back the keys behind it within that
horizon."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from caravel.jobs import FailureCategory, JobState
from caravel.limits import MAX_PRIORITY, PRIORITY_AGING_MS
from caravel.store.rows import CLAIM_RETURNING
from caravel.store.schema import claim_rank, jobs, partition
from caravel.store.values import ClaimSource

__all__ = [
    "KEY_SCAN",
    "RANK_HORIZON_MS",
    "claim",
    "claim_ids",
    "claim_per_key",
    "due_weighed",
    "running_by_key",
    "running_count",
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

Lock = Callable[[sa.Select[Any]], sa.Select[Any]]


def _no_lock(picked: sa.Select[Any]) -> sa.Select[Any]:
    return picked


def _source(
    source: ClaimSource,
    now: Any,
    limit: Any,
    lock: Lock,
    *,
    keyed: bool = False,
    partitioned: bool = False,
) -> sa.Select[Any]:
    """The ids of up to ``limit`` jobs of one source, in its order (with that order's key as
    ``k`` when ``keyed``, and the partition key as ``key`` when ``partitioned``), locked the
    dialect's way. The state is literal SQL, so the planner can match the partial indexes."""
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
    columns: tuple[Any, ...] = (jobs.c.id, order.label("k")) if keyed else (jobs.c.id,)
    if partitioned:
        columns = (*columns, partition.label("key"))
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
    limit = sa.bindparam("b_limit", type_=sa.Integer(), literal_execute=literal_limit)
    return _update(_candidates(source, now, limit, lock), now, target, still_due=False)


def running_count() -> sa.Select[Any]:
    """How many of ``b_queue``'s jobs run with a lease unexpired at ``b_now`` (a running job's
    ``available_at`` is its lease's expiry), read from ``ix_caravel_jobs_leases``."""
    now = sa.bindparam("b_now", type_=sa.BigInteger())
    return sa.select(sa.func.count()).where(
        jobs.c.queue == sa.bindparam("b_queue"),
        jobs.c.state == sa.literal_column(f"'{RUNNING}'"),
        jobs.c.available_at > now,
    )


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
    parts = []
    for part, name in enumerate(sources):
        picked = _source(name, now, scan, _no_lock, keyed=True, partitioned=True)
        inner = picked.subquery(f"{name}_jobs")
        parts.append(
            sa.select(
                inner.c.id, inner.c.key, sa.literal_column(str(part)).label("part"), inner.c.k
            )
        )
    due = (sa.union_all(*parts) if len(parts) > 1 else parts[0]).subquery("due_jobs")
    ranked = sa.select(
        due.c.id,
        due.c.key,
        due.c.part,
        due.c.k,
        sa.func.row_number()
        .over(partition_by=due.c.key, order_by=(due.c.part, due.c.k))
        .label("n"),
    ).subquery("ranked")
    running = (
        sa.select(partition.label("key"), sa.func.count().label("running"))
        .where(
            jobs.c.queue == sa.bindparam("b_queue"),
            jobs.c.state == sa.literal_column(f"'{RUNNING}'"),
            jobs.c.available_at > now,
        )
        .group_by(partition)
        .subquery("running_keys")
    )
    per_key = sa.bindparam("b_per_key", type_=sa.Integer())
    limit = sa.bindparam("b_limit", type_=sa.Integer(), literal_execute=True)
    chosen = (
        sa.select(ranked.c.id)
        .select_from(ranked.outerjoin(running, running.c.key == ranked.c.key))
        .where(ranked.c.n + sa.func.coalesce(running.c.running, 0) <= per_key)
        .order_by(ranked.c.part, ranked.c.k)
        .limit(limit)
    )
    return _update(chosen, now, target, still_due=True)


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


def due_weighed(source: ClaimSource) -> sa.Select[Any]:
    """The first :data:`KEY_SCAN` due jobs of each of ``source``'s sources in claim order, bound
    as :func:`claim` is, each with its partition key and weight (columns ``id``, ``key``,
    ``weight``): what a claim under a rate limit chooses from (:func:`caravel.flow.window.fit`).
    It runs where the queue's limited claims take turns, so it locks nothing."""
    now = sa.bindparam("b_now", type_=sa.BigInteger())
    scan: Any = sa.literal_column(str(KEY_SCAN))
    sources: tuple[ClaimSource, ...] = ("expired", "ready") if source == "any" else (source,)
    parts = []
    for part, name in enumerate(sources):
        picked = _source(name, now, scan, _no_lock, keyed=True, partitioned=True)
        inner = picked.subquery(f"{name}_jobs")
        parts.append(sa.select(inner.c.id, sa.literal_column(str(part)).label("part"), inner.c.k))
    due = (sa.union_all(*parts) if len(parts) > 1 else parts[0]).subquery("due_jobs")
    weight: Any = sa.func.coalesce(jobs.c.weight, 1)
    return (
        sa.select(jobs.c.id, partition.label("key"), weight.label("weight"))
        .select_from(due.join(jobs, jobs.c.id == due.c.id))
        .order_by(due.c.part, due.c.k)
    )


def claim_ids() -> sa.Update:
    """The claim of the jobs ``b_ids`` names (chosen by a limited claim), bound as
    :func:`claim` is otherwise; as :func:`claim_per_key`, it takes only those still due."""
    now = sa.bindparam("b_now", type_=sa.BigInteger())
    chosen = jobs.c.id.in_(sa.bindparam("b_ids", expanding=True))
    return _update(sa.select(jobs.c.id), now, lambda _: chosen, still_due=True)


def _update(candidates: sa.Select[Any], now: Any, target: Any, *, still_due: bool) -> sa.Update:
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
