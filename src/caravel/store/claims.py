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
horizon.

A claim of a fair queue (:func:`claim_fair`) takes its ready jobs round-robin across partition
keys: it finds the keys with due work by skipping through ``ix_caravel_jobs_fair`` (at most
:data:`KEY_SCAN` of them), reads at most the batch of each key's jobs in claim order, numbers
them within their key after the key's jobs already running, and takes the batch in order of
round, a key of weight ``w`` having ``w`` jobs in each round: the job numbered ``n`` of a key
with ``r`` jobs running is in round ``(r + n - 1) // w``. Within a round the keys take their
turns in key order, starting after the queue's cursor (``b_cursor``: the key its last claim
served last, ``''`` for none; :func:`caravel.flow.fairness.next_cursor`). So a key with jobs
running goes behind the keys with none, and claims of one job at a time go round the keys. A
lone key gets the whole batch, a key without due work takes no turn, and within a key jobs
keep the claim's order (priorities and their aging)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from caravel.jobs import FailureCategory, JobState
from caravel.limits import MAX_PRIORITY, PRIORITY_AGING_MS
from caravel.store.rows import CLAIM_RETURNING
from caravel.store.schema import claim_rank, jobs, partition, queue_limits, queue_weights
from caravel.store.values import ClaimSource

__all__ = [
    "KEY_SCAN",
    "RANK_HORIZON_MS",
    "KeyJobs",
    "claim",
    "claim_fair",
    "claim_ids",
    "claim_per_key",
    "due_weighed",
    "in_key_jobs",
    "lateral_key_jobs",
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

#: The dialect's way to read each key's first jobs: given the keys (a selectable with ``key``)
#: and ``first(table, key)``, the ids and claim ranks (``k``) of ``key``'s first due ready jobs
#: in ``table`` (an alias of the jobs table), returns a select of ``id``, ``k`` and ``key``.
KeyJobs = Callable[[Any, Callable[[Any, Any], sa.Select[Any]]], sa.Select[Any]]


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


def _candidates(
    source: ClaimSource, now: Any, limit: Any, lock: Lock, *, unlimited: bool
) -> sa.Select[Any]:
    if source != "any":
        return _source(source, now, limit, lock, unlimited=unlimited)
    parts = []
    sources: tuple[ClaimSource, ...] = ("expired", "ready")
    for part, name in enumerate(sources):
        one = _source(name, now, limit, lock, keyed=True, unlimited=unlimited)
        picked = one.subquery(f"{name}_jobs")
        parts.append(sa.select(picked.c.id, sa.literal_column(str(part)).label("part"), picked.c.k))
    both = sa.union_all(*parts).subquery("due_jobs")
    return sa.select(both.c.id).order_by(both.c.part, both.c.k).limit(limit)


def _running_per_key(now: Any) -> sa.Subquery:
    """Each key's jobs of ``b_queue`` running with a lease unexpired at ``now``, as
    ``running_keys(key, running)``."""
    return (
        sa.select(partition.label("key"), sa.func.count().label("running"))
        .where(
            jobs.c.queue == sa.bindparam("b_queue"),
            jobs.c.state == sa.literal_column(f"'{RUNNING}'"),
            jobs.c.available_at > now,
        )
        .group_by(partition)
        .subquery("running_keys")
    )


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
    return _update(candidates, now, target, still_due=False)


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
    running = _running_per_key(now)
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


def _rank_of(table: Any) -> Any:
    return table.c.due_at - table.c.priority * sa.literal_column(str(PRIORITY_AGING_MS))


def _partition_of(table: Any) -> Any:
    return sa.func.coalesce(table.c.partition_key, table.c.tenant_id)


def _ready_due(table: Any, now: Any) -> tuple[sa.ColumnElement[bool], ...]:
    """The conditions ``ix_caravel_jobs_fair`` answers: ``table``'s ready rows of ``b_queue``
    whose claim rank could be due (``_source``'s horizon)."""
    return (
        table.c.queue == sa.bindparam("b_queue"),
        table.c.state == sa.literal_column(f"'{READY}'"),
        _rank_of(table) <= now + sa.literal_column(str(RANK_HORIZON_MS)),
    )


def _due_keys(now: Any) -> Any:
    """The partition keys with ready jobs of ``b_queue`` (at most :data:`KEY_SCAN`), found by
    skipping through ``ix_caravel_jobs_fair`` one key at a time (a loose index scan): each step
    is one index seek, however many jobs a key has."""
    found = jobs.alias("key_seek")
    key = _partition_of(found)

    def after(previous: Any) -> Any:
        picked = sa.select(key).where(*_ready_due(found, now))
        if previous is not None:
            picked = picked.where(key > previous)
        # No CAST: on SQLite a value with a type affinity is not compared through an index on
        # an expression (which has none), and each step would read the queue's whole index.
        return picked.order_by(key).limit(1).scalar_subquery()

    first = sa.select(after(None).label("key"), sa.literal_column("1").label("depth"))
    keys = first.cte("due_keys", recursive=True)
    step = sa.select(after(keys.c.key), keys.c.depth + 1).where(
        keys.c.key.is_not(None), keys.c.depth < sa.literal_column(str(KEY_SCAN))
    )
    return keys.union_all(step)


def claim_fair(source: ClaimSource, target: Any, key_jobs: KeyJobs, *, per_key: bool) -> sa.Update:
    """The claim of ``source`` in a fair queue, bound as :func:`claim` is plus ``b_cursor``
    (and ``b_per_key`` with ``per_key``): expired leases first as :func:`claim_per_key` takes
    them, then ready jobs
    round-robin across partition keys (see the module docstring), weighted by the queue's rows
    of ``caravel_queue_weights``, a key's jobs already running counting into its rounds. With
    ``per_key``, a job is taken only while its key's running jobs and those numbered before it
    stay within ``b_per_key``.

    Like :func:`claim_per_key` it runs where the queue's limited claims take turns, so it locks
    no candidate, and the update takes only rows still due at ``b_now``."""
    now = sa.bindparam("b_now", type_=sa.BigInteger())
    limit = sa.bindparam("b_limit", type_=sa.Integer(), literal_execute=True)
    keys = _due_keys(now)
    listed = sa.select(keys.c.key).where(keys.c.key.is_not(None)).subquery("fair_keys")

    def first(table: Any, key: Any) -> sa.Select[Any]:
        rank = _rank_of(table)
        return (
            sa.select(table.c.id, rank.label("k"))
            .where(*_ready_due(table, now), _partition_of(table) == key)
            .where(table.c.available_at <= now)
            .order_by(rank)
            .limit(limit)
        )

    ready = key_jobs(listed, first).subquery("ready_jobs")
    parts = [sa.select(ready.c.id, ready.c.key, sa.literal_column("1").label("part"), ready.c.k)]
    if source != "ready":
        scan: Any = sa.literal_column(str(KEY_SCAN)) if per_key else limit
        expired = _source("expired", now, scan, _no_lock, keyed=True, partitioned=True)
        picked = expired.subquery("expired_jobs")
        parts.insert(
            0,
            sa.select(picked.c.id, picked.c.key, sa.literal_column("0").label("part"), picked.c.k),
        )
        if source == "expired":
            parts = parts[:1]
    due = (sa.union_all(*parts) if len(parts) > 1 else parts[0]).subquery("due_jobs")
    ranked = sa.select(
        due.c.id,
        due.c.key,
        due.c.part,
        due.c.k,
        sa.func.row_number()
        .over(partition_by=(due.c.part, due.c.key), order_by=(due.c.k, due.c.id))
        .label("n"),
        sa.func.row_number()
        .over(partition_by=due.c.key, order_by=(due.c.part, due.c.k, due.c.id))
        .label("in_key"),
    ).subquery("ranked")
    weight = sa.func.coalesce(queue_weights.c.weight, 1)
    joined = ranked.outerjoin(
        queue_weights,
        sa.and_(
            queue_weights.c.queue == sa.bindparam("b_queue"), queue_weights.c.key == ranked.c.key
        ),
    )
    # Each key's jobs running with a lease unexpired, read from ix_caravel_jobs_leases: as
    # many rows as the queue has jobs running, never its backlog.
    running = _running_per_key(now)
    joined = joined.outerjoin(running, running.c.key == ranked.c.key)
    running_of_key = sa.func.coalesce(running.c.running, 0)
    where: list[sa.ColumnElement[bool]] = []
    if per_key:
        cap = sa.bindparam("b_per_key", type_=sa.Integer())
        where.append(ranked.c.in_key + running_of_key <= cap)
    # A key's running jobs count into its rounds (integer division): a key of weight w with r
    # jobs running has its ready jobs r+1..w in round 0, then w at a time. Expired leases,
    # taken first, go in the order their leases expired.
    turn = sa.case(
        (ranked.c.part == sa.literal_column("0"), sa.literal_column("0")),
        else_=(running_of_key + ranked.c.n - 1) // weight,
    )
    # Within a round, the keys after the cursor first, in key order, then the others (see
    # caravel.flow.fairness.comes_after); within a key, claim order.
    # Expired leases keep the order they expired in.
    cursor = sa.bindparam("b_cursor", type_=sa.String())
    expired_part = ranked.c.part == sa.literal_column("0")
    wrapped = sa.case(
        (sa.or_(expired_part, ranked.c.key > cursor), sa.literal_column("0")),
        else_=sa.literal_column("1"),
    )
    key_turn = sa.case((expired_part, sa.literal("")), else_=ranked.c.key)
    chosen = (
        sa.select(ranked.c.id)
        .select_from(joined)
        .where(*where)
        .order_by(ranked.c.part, turn, wrapped, key_turn, ranked.c.k)
        .limit(limit)
    )
    return _update(chosen, now, target, still_due=True)


def lateral_key_jobs(keys: Any, first: Callable[[Any, Any], sa.Select[Any]]) -> sa.Select[Any]:
    """:data:`KeyJobs` with ``LATERAL`` (PostgreSQL): each key's first jobs, read by one
    bounded index scan per key."""
    picked = first(jobs, keys.c.key).lateral("key_jobs")
    return sa.select(picked.c.id, picked.c.k, keys.c.key).select_from(keys.join(picked, sa.true()))


def in_key_jobs(keys: Any, first: Callable[[Any, Any], sa.Select[Any]]) -> sa.Select[Any]:
    """:data:`KeyJobs` without ``LATERAL`` (SQLite): each key's first job ids, read by a
    correlated ``IN`` subquery with its own ``LIMIT``, then the jobs by primary key."""
    found = jobs.alias("key_jobs")
    ids = first(found, keys.c.key).with_only_columns(found.c.id)
    return sa.select(jobs.c.id, claim_rank.label("k"), keys.c.key).select_from(
        keys.join(jobs, jobs.c.id.in_(ids))
    )


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
    as :func:`claim` is, each with its partition key, weight and source (columns ``id``,
    ``key``, ``weight``, ``part``: the source's position among ``source``'s): what a claim
    under a rate limit chooses from (:func:`caravel.flow.window.fit`). It runs where the
    queue's limited claims take turns, so it locks nothing."""
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
        sa.select(jobs.c.id, partition.label("key"), weight.label("weight"), due.c.part)
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
