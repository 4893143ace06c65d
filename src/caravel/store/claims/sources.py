"""The pieces every claim statement is built of: the due jobs of one source in its order
(:func:`due_ids`), the running jobs that count against each key (:func:`running_part`), and
the ``UPDATE`` that claims the chosen rows (:func:`claim_update`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from caravel.jobs import FailureCategory, JobState
from caravel.limits import MAX_PRIORITY, PRIORITY_AGING_MS
from caravel.store.attempts import dropped
from caravel.store.claims.nonces import NONCE
from caravel.store.rows import CLAIM_RETURNING
from caravel.store.schema import claim_rank, jobs, partition, queue_limits
from caravel.store.values import ClaimSource

__all__ = [
    "KEY_SCAN",
    "RANK_HORIZON_MS",
    "RUNNING_PART",
    "Lock",
    "claim_update",
    "due_ids",
    "no_lock",
    "running_part",
]

RUNNING = JobState.RUNNING.value
READY = JobState.READY.value
DEAD = JobState.DEAD_LETTER.value

#: How far past now the rank of a due job can lie (a due job of the lowest priority): the claim
#: stops reading the index there, so a queue of far-future delayed jobs is not read to its end.
RANK_HORIZON_MS = MAX_PRIORITY * PRIORITY_AGING_MS

#: The ``part`` of the running jobs among a claim's candidates (:func:`running_part`): before
#: every source's, so a key's running jobs come first when its rows are numbered.
RUNNING_PART = -1

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
    fits: Any = None,
) -> sa.Select[Any]:
    """The ids of up to ``limit`` jobs of one source, in its order (with that order's key as
    ``k`` when ``keyed``, and the partition key as ``key`` when ``partitioned``), locked the
    dialect's way; with ``unlimited``, none while ``b_queue`` has a limits row; given ``fits``
    (the heaviest weight a rate lets start), only the jobs no heavier, each with its ``weight``.
    The state is literal SQL, so the planner can match the partial indexes."""
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
    if fits is not None:
        # A job heavier than the rate can never start: passed over here, so it cannot fill
        # a claim's candidates and hold back the jobs behind it.
        weight: Any = sa.func.coalesce(jobs.c.weight, 1)
        columns = (*columns, weight.label("weight"))
        where = (*where, weight <= fits)
    return lock(sa.select(*columns).where(*due, *where).order_by(order).limit(limit))


def running_part(now: Any) -> sa.Select[Any]:
    """``b_queue``'s jobs running with a lease unexpired at ``now`` as rows of a claim's
    candidates (``id``, ``key``, ``part`` :data:`RUNNING_PART`, ``k`` ``NULL``), read from
    ``ix_caravel_jobs_leases``: as many rows as the queue has jobs running, never its backlog.

    A claim unions them with its candidates and counts each key's running jobs with a window
    over the key, the same sort that numbers the key's candidates. Joined to the candidates by
    key instead, a planner without statistics (a table that filled up before autovacuum
    analysed it) took both sides for one row and compared every candidate with every running
    key: a million comparisons for a claim of 1,000 with 1,000 keys running."""
    return sa.select(
        jobs.c.id,
        partition.label("key"),
        sa.literal_column(str(RUNNING_PART)).label("part"),
        sa.cast(sa.null(), sa.BigInteger()).label("k"),
    ).where(
        jobs.c.queue == sa.bindparam("b_queue"),
        jobs.c.state == sa.literal_column(f"'{RUNNING}'"),
        jobs.c.available_at > now,
    )


def claim_update(
    candidates: sa.Select[Any], now: Any, target: Any, *, still_due: bool, takes_over: bool = True
) -> sa.Update:
    """The ``UPDATE`` claiming the rows ``target(candidates)`` names (with ``still_due``, only
    those still due at ``now``): each becomes running under a new lease, token and nonce
    (``b_nonce``, :mod:`caravel.store.claims.nonces`) held by the worker ``b_worker``, or,
    when its last attempt's lease expired, is dead-lettered; returns :data:`CLAIM_RETURNING`.
    With ``takes_over`` (the candidates may include expired leases), a row whose lease expired
    counts what the trim of its attempt history under ``b_keep`` drops when its lost attempt is
    recorded (see :mod:`caravel.store.claims.takeover`)."""
    expires = sa.bindparam("b_expires", type_=sa.BigInteger())
    exhausted = sa.and_(jobs.c.state == RUNNING, jobs.c.attempt >= jobs.c.max_attempts)

    def pick(if_exhausted: Any, otherwise: Any) -> sa.Case[Any]:
        return sa.case((exhausted, if_exhausted), else_=otherwise)

    where = [target(candidates)]
    if still_due:
        # Ready and due, or running with an expired lease: nothing else has available_at <= now.
        where.append(jobs.c.available_at <= now)
    values: dict[str, Any] = {
        "state": pick(DEAD, RUNNING),
        "attempt": pick(jobs.c.attempt, jobs.c.attempt + 1),
        "lease_token": jobs.c.lease_token + 1,
        "lease_expires_at": pick(sa.null(), expires),
        "available_at": pick(sa.null(), expires),
        "started_at": pick(jobs.c.started_at, now),
        "finished_at": pick(now, sa.null()),
        "last_failure": pick(FailureCategory.LEASE_EXPIRED.value, jobs.c.last_failure),
        "updated_at": now,
        "worker_id": pick(jobs.c.worker_id, sa.bindparam("b_worker", type_=sa.Uuid())),
        "lease_nonce": pick(jobs.c.lease_nonce, NONCE),
    }
    if takes_over:
        lost = sa.case((jobs.c.state == RUNNING, dropped()), else_=sa.literal_column("0"))
        values["attempts_dropped"] = jobs.c.attempts_dropped + lost
    return sa.update(jobs).where(*where).values(values).returning(*CLAIM_RETURNING)
