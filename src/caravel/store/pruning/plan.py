"""Pruning, written once for the SQL stores as a plan (see :mod:`caravel.store.plans`).

One batch is one short transaction that touches at most ``limit`` rows. It lists the queues with
finished rows first (one probe of the finished index per queue), then, queue by queue and end
state by end state, picks old rows through that index (``queue``, ``state`` where
``available_at IS NULL``), deletes the keyless ones and compacts the keyed ones into tombstones:
the job's own row, payload emptied and its content kept as :func:`~caravel.retention.content_hash`,
so the unique idempotency index goes on settling repeats and conflicts with no change to any
insert path. Either way the job's attempt records go with it. Live rows (``available_at`` set)
are never read or written. A workflow's steps are left to :mod:`~caravel.store.pruning.workflows`,
which prunes a finished workflow whole; but a chain's steps and a batch's members, though their
chain or batch is a workflow (migration 0022), are pruned one by one as before, each with its
step row and edges (a batch's callback goes with the workflow's remains once the members went).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from caravel.jobs import JobState
from caravel.retention import content_hash
from caravel.store.attempts import records_deleted
from caravel.store.plans import Plan, Step
from caravel.store.pruning.requests import PruneBatch, PruneRequest
from caravel.store.pruning.workflows import (
    expired_plan,
    step_rows_deleted,
    workflow_count_plan,
    workflow_prune_plan,
)
from caravel.store.removal.statements import kept_for_chain
from caravel.store.schema import jobs

__all__ = ["prune_plan"]

PRUNED = JobState.PRUNED.value
DEAD = JobState.DEAD_LETTER.value
_FINISHED = jobs.c.available_at.is_(None)


def _next_queue(after: str | None) -> sa.Select[Any]:
    """The first queue after ``after`` holding finished rows (or tombstones): read in the
    finished index's own order, it stops at its first entry."""
    found = sa.select(jobs.c.queue).where(_FINISHED)
    if after is not None:
        found = found.where(jobs.c.queue > after)
    return found.order_by(jobs.c.queue, jobs.c.state).limit(1)


def _old(queue: str, state: str, cutoff: int) -> list[sa.ColumnElement[bool]]:
    """Rows of ``queue`` in ``state`` that finished (or, for tombstones, were pruned) before
    ``cutoff``; never a dead letter that a held chain step waits for (see
    :func:`~caravel.store.removal.statements.kept_for_chain`)."""
    when = jobs.c.pruned_at if state == PRUNED else jobs.c.finished_at
    old = [jobs.c.queue == queue, jobs.c.state == state, _FINISHED, when < cutoff]
    if state != PRUNED:  # a workflow's steps go with their workflow (pruning.workflows)
        linked = (jobs.c.chain_id.is_not(None), jobs.c.batch_id.is_not(None))
        old.append(sa.or_(jobs.c.workflow_id.is_(None), *linked))
    if state == DEAD:
        old.append(~kept_for_chain())
    return old


def _candidates(queue: str, state: str, cutoff: int, limit: int) -> sa.Select[Any]:
    columns = (
        jobs.c.id,
        jobs.c.idempotency_key,
        jobs.c.job_type,
        jobs.c.payload,
        jobs.c.workflow_id,
    )
    return sa.select(*columns).where(*_old(queue, state, cutoff)).limit(limit)


def _delete(state: str) -> sa.Delete:
    ids = sa.bindparam("b_ids", expanding=True, type_=sa.Uuid())
    return sa.delete(jobs).where(jobs.c.id.in_(ids), jobs.c.state == state, _FINISHED)


def _tombstone(state: str) -> sa.Update:
    """A keyed finished job compacted in place: what it said is gone, its key, id, queue,
    tenant, type and times stay."""
    return (
        sa.update(jobs)
        .where(jobs.c.id == sa.bindparam("b_id"), jobs.c.state == state, _FINISHED)
        .values(
            state=PRUNED,
            payload="",
            content_hash=sa.bindparam("b_hash"),
            pruned_at=sa.bindparam("b_now"),
            updated_at=sa.bindparam("b_now"),
            result=None,
            upstream=None,
            tags=None,
            trace_context=None,
            last_failure=None,
            error_class=None,
            cancel_requested_at=None,
            progress=None,
            progress_at=None,
            meta=None,
        )
    )


def _count(queue: str, state: str, cutoff: int) -> sa.Select[int, int]:
    counted = sa.select(sa.func.count(), sa.func.count(jobs.c.idempotency_key))
    return counted.where(*_old(queue, state, cutoff))


def _queues_plan(request: PruneRequest) -> Plan[list[str]]:
    if request.queue is not None:
        return [request.queue]
    names: list[str] = []
    after: str | None = None
    while True:
        rows = yield Step(_next_queue(after))
        if not rows:
            return names
        after = rows[0][0]
        names.append(after)


def prune_plan(request: PruneRequest, *, lock_rows: bool) -> Plan[PruneBatch]:
    """One batch as :class:`~caravel.store.pruning.requests.PruneRequest` says. ``lock_rows``:
    lock the picked rows, skipping any another transaction holds (PostgreSQL), where the
    database has more than one writer."""
    queues = yield from _queues_plan(request)
    if request.dry_run:
        return (yield from _count_plan(request, queues))
    deleted = tombstoned = expired = 0
    budget = request.limit
    for queue in queues:
        for state, cutoff in request.cutoffs():
            if budget <= 0:
                break
            picked = _candidates(queue, state.value, cutoff, budget)
            if lock_rows:
                picked = picked.with_for_update(skip_locked=True)
            rows = yield Step(picked)
            keyless = [row.id for row in rows if row.idempotency_key is None]
            keyed = [
                {"b_id": row.id, "b_hash": content_hash(row.job_type, row.payload)}
                for row in rows
                if row.idempotency_key is not None
            ]
            if keyless:
                yield Step(_delete(state.value), {"b_ids": keyless})
            if keyed:
                yield Step(_tombstone(state.value), [{**k, "b_now": request.now} for k in keyed])
            if rows:
                yield Step(records_deleted(), {"b_ids": [row.id for row in rows]})
            steps = [row.id for row in rows if row.workflow_id is not None]
            if steps:  # a chain's step or a batch's member: its step row and edges go too
                yield from step_rows_deleted(steps)
            deleted, tombstoned = deleted + len(keyless), tombstoned + len(keyed)
            budget -= len(rows)
        if request.tombstones_before is not None and budget > 0:
            picked = _candidates(queue, PRUNED, request.tombstones_before, budget)
            if lock_rows:
                picked = picked.with_for_update(skip_locked=True)
            ids = [row.id for row in (yield Step(picked))]
            if ids:
                yield Step(_delete(PRUNED), {"b_ids": ids})
            expired += len(ids)
            budget -= len(ids)
    if budget > 0:
        deleted += yield from workflow_prune_plan(request, budget)
    if request.tombstones_before is not None:
        yield from expired_plan(request.tombstones_before)
    return PruneBatch(deleted, tombstoned, expired)


def _count_plan(request: PruneRequest, queues: list[str]) -> Plan[PruneBatch]:
    """What a prune at ``request.now`` would remove in all, without the batch bound."""
    deleted = tombstoned = expired = 0
    for queue in queues:
        for state, cutoff in request.cutoffs():
            total, keyed = (yield Step(_count(queue, state.value, cutoff)))[0]
            deleted, tombstoned = deleted + total - keyed, tombstoned + keyed
        if request.tombstones_before is not None:
            expired += (yield Step(_count(queue, PRUNED, request.tombstones_before)))[0][0]
    deleted += yield from workflow_count_plan(request)
    return PruneBatch(deleted, tombstoned, expired)
