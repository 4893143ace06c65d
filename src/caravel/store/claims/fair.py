"""The claim of a fair queue (:func:`claim_fair`): its ready jobs round-robin across
partition keys, from the queue's cursor."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from caravel.flow.fairness import SHARE_SLACK
from caravel.limits import PRIORITY_AGING_MS
from caravel.store.claims.sources import (
    KEY_SCAN,
    RANK_HORIZON_MS,
    READY,
    RUNNING_PART,
    claim_update,
    due_ids,
    no_lock,
    running_part,
)
from caravel.store.schema import claim_rank, jobs, queue_weights
from caravel.store.values import ClaimSource

__all__ = ["KeyJobs", "claim_fair", "in_key_jobs"]

#: The dialect's way to read each key's first jobs: given the keys (a selectable with ``key``)
#: and ``first(table, key)``, the ids and claim ranks (``k``) of ``key``'s first due ready jobs
#: in ``table`` (an alias of the jobs table), returns a select of ``id``, ``k`` and ``key``.
KeyJobs = Callable[[Any, Callable[[Any, Any], sa.Select[Any]]], sa.Select[Any]]


def rank_of(table: Any) -> Any:
    return table.c.due_at - table.c.priority * sa.literal_column(str(PRIORITY_AGING_MS))


def partition_of(table: Any) -> Any:
    return sa.func.coalesce(table.c.partition_key, table.c.tenant_id)


def ready_due(table: Any, now: Any) -> tuple[sa.ColumnElement[bool], ...]:
    """The conditions ``ix_caravel_jobs_fair`` answers: ``table``'s ready rows of ``b_queue``
    whose claim rank could be due (``due_ids``'s horizon)."""
    return (
        table.c.queue == sa.bindparam("b_queue"),
        table.c.state == sa.literal_column(f"'{READY}'"),
        rank_of(table) <= now + sa.literal_column(str(RANK_HORIZON_MS)),
    )


def due_keys(now: Any) -> Any:
    """The partition keys with ready jobs of ``b_queue`` (at most :data:`KEY_SCAN`), found by
    skipping through ``ix_caravel_jobs_fair`` one key at a time (a loose index scan): each step
    is one index seek, however many jobs a key has."""
    found = jobs.alias("key_seek")
    key = partition_of(found)

    def after(previous: Any) -> Any:
        picked = sa.select(key).where(*ready_due(found, now))
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


def _share(keys: Any, limit: Any, *, weighted: bool) -> Any:
    """How many of each key's first jobs a fair claim of ``limit`` reads
    (:func:`caravel.flow.fairness.share`): a small multiple of its batch in all, never every
    key's backlog."""
    found: Any = (
        sa.select(sa.func.count()).select_from(keys).where(keys.c.key.is_not(None))
    ).scalar_subquery()
    counted = sa.case((found > 0, found), else_=sa.literal_column("1"))
    heaviest: Any = sa.literal_column("1")
    if weighted:
        heaviest = (
            sa.select(sa.func.coalesce(sa.func.max(queue_weights.c.weight), 1))
            .where(queue_weights.c.queue == sa.bindparam("b_queue"))
            .scalar_subquery()
        )
    # Integer division on both databases: the share rounds up, then doubles
    # (caravel.flow.fairness.SHARE_SLACK).
    slack: Any = sa.literal_column(str(SHARE_SLACK))
    return (limit + counted - 1) // counted * heaviest * slack


def claim_fair(
    source: ClaimSource, target: Any, key_jobs: KeyJobs, *, per_key: bool, weighted: bool = True
) -> sa.Update:
    """The claim of ``source`` in a fair queue, bound as :func:`claim` is plus ``b_cursor``
    (and ``b_per_key`` with ``per_key``): expired leases first as :func:`claim_per_key` takes
    them, then ready jobs
    round-robin across partition keys (see the module docstring), weighted by the queue's rows
    of ``caravel_queue_weights``, a key's jobs already running counting into its rounds. With
    ``per_key``, a job is taken only while its key's running jobs and those numbered before it
    stay within ``b_per_key``.

    Like :func:`claim_per_key` it runs where the queue's limited claims take turns, so it locks
    no candidate, and the update takes only rows still due at ``b_now``. Without ``weighted``
    (the queue has no weights: every key weighs 1), it reads no weight."""
    now = sa.bindparam("b_now", type_=sa.BigInteger())
    limit = sa.bindparam("b_limit", type_=sa.Integer(), literal_execute=True)
    keys = due_keys(now)
    listed = sa.select(keys.c.key).where(keys.c.key.is_not(None)).subquery("fair_keys")
    share = _share(keys, limit, weighted=weighted)

    def first(table: Any, key: Any) -> sa.Select[Any]:
        rank = rank_of(table)
        return (
            sa.select(table.c.id, rank.label("k"))
            .where(*ready_due(table, now), partition_of(table) == key)
            .where(table.c.available_at <= now)
            .order_by(rank)
            .limit(share)
        )

    ready = key_jobs(listed, first).subquery("ready_jobs")
    parts = [sa.select(ready.c.id, ready.c.key, sa.literal_column("1").label("part"), ready.c.k)]
    if source != "ready":
        scan: Any = sa.literal_column(str(KEY_SCAN)) if per_key else limit
        expired = due_ids("expired", now, scan, no_lock, keyed=True, partitioned=True)
        picked = expired.subquery("expired_jobs")
        parts.insert(
            0,
            sa.select(picked.c.id, picked.c.key, sa.literal_column("0").label("part"), picked.c.k),
        )
        if source == "expired":
            parts = parts[:1]
    # The running jobs go in as rows of their own (see running_part), first in their key.
    due = sa.union_all(running_part(now), *parts).subquery("due_jobs")
    is_running = due.c.part == sa.literal_column(str(RUNNING_PART))
    ranked = sa.select(
        due.c.id,
        due.c.key,
        due.c.part,
        due.c.k,
        sa.func.row_number()
        .over(partition_by=(due.c.key, due.c.part), order_by=(due.c.k, due.c.id))
        .label("n"),
        # After the key's running jobs: what the key would have running with this job.
        sa.func.row_number()
        .over(partition_by=due.c.key, order_by=(due.c.part, due.c.k, due.c.id))
        .label("in_key"),
        sa.func.sum(sa.case((is_running, sa.literal_column("1")), else_=sa.literal_column("0")))
        .over(partition_by=due.c.key)
        .label("running"),
    ).subquery("ranked")
    # One primary-key probe per candidate, whatever the planner thinks the table holds.
    stored_weight = (
        sa.select(queue_weights.c.weight)
        .where(
            queue_weights.c.queue == sa.bindparam("b_queue"), queue_weights.c.key == ranked.c.key
        )
        .scalar_subquery()
    )
    weight = sa.func.coalesce(stored_weight, 1)
    running_of_key = ranked.c.running
    where: list[sa.ColumnElement[bool]] = [ranked.c.part > sa.literal_column(str(RUNNING_PART))]
    if per_key:
        cap = sa.bindparam("b_per_key", type_=sa.Integer())
        where.append(ranked.c.in_key <= cap)
    # A key's running jobs count into its rounds (integer division): a key of weight w with r
    # jobs running has its ready jobs r+1..w in round 0, then w at a time. Expired leases,
    # taken first, go in the order their leases expired.
    turned = running_of_key + ranked.c.n - 1
    turn = sa.case(
        (ranked.c.part == sa.literal_column("0"), sa.literal_column("0")),
        else_=turned // weight if weighted else turned,
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
        .where(*where)
        .order_by(ranked.c.part, turn, wrapped, key_turn, ranked.c.k)
        .limit(limit)
    )
    return claim_update(chosen, now, target, still_due=True, takes_over=source != "ready")


def in_key_jobs(keys: Any, first: Callable[[Any, Any], sa.Select[Any]]) -> sa.Select[Any]:
    """:data:`KeyJobs` without ``LATERAL`` (SQLite): each key's first job ids, read by a
    correlated ``IN`` subquery with its own ``LIMIT``, then the jobs by primary key."""
    found = jobs.alias("key_jobs")
    ids = first(found, keys.c.key).with_only_columns(found.c.id)
    return sa.select(jobs.c.id, claim_rank.label("k"), keys.c.key).select_from(
        keys.join(jobs, jobs.c.id.in_(ids))
    )
