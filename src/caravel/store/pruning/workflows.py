"""Pruning workflows on the SQL stores: a workflow goes whole, never a step of one that still
has a live step (ready, held or running) or a step younger than its state's age. Its steps'
jobs, their attempt records, step rows and edges go in the prune's batches (a workflow larger
than a batch over several, each leaving a workflow whose remaining steps are all prunable);
with its last step its signals go, and its row, unless it has an idempotency key: then the row
stays as the key's tombstone (``pruned_at`` set, steps gone), so a repeated submission still
returns it and another graph still conflicts, until tombstones expire as jobs' do."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import sqlalchemy as sa

from caravel.store.attempts import records_deleted
from caravel.store.plans import Plan, Step
from caravel.store.pruning.requests import PruneRequest
from caravel.store.schema import jobs, workflow_edges, workflow_signals, workflow_steps, workflows

__all__ = ["expired_plan", "step_rows_deleted", "workflow_count_plan", "workflow_prune_plan"]

_IDS = sa.bindparam("b_ids", expanding=True, type_=sa.Uuid())


def _prunable_step(request: PruneRequest) -> sa.ColumnElement[bool]:
    """A step (job) this request would prune on its own: finished in a state with an age,
    before that age's cutoff (of the request's queue, when it names one)."""
    old = [
        sa.and_(jobs.c.state == state.value, jobs.c.finished_at < cutoff)
        for state, cutoff in request.cutoffs()
    ]
    kept: list[sa.ColumnElement[bool]] = [jobs.c.available_at.is_(None), sa.or_(*old)]
    if request.queue is not None:
        kept.append(jobs.c.queue == request.queue)
    return sa.and_(*kept)


def _whole(request: PruneRequest) -> sa.ColumnElement[bool]:
    """A workflow none of whose steps is left out by the request (so, none live)."""
    left = sa.select(jobs.c.id).where(
        jobs.c.workflow_id == workflows.c.id, ~_prunable_step(request)
    )
    return sa.and_(workflows.c.pruned_at.is_(None), ~sa.exists(left))


def workflow_prune_plan(request: PruneRequest, budget: int) -> Plan[int]:
    """Prune whole finished workflows, at most ``budget`` steps; how many steps went."""
    if not request.cutoffs():
        return 0
    done = 0
    while done < budget:
        found = yield Step(
            sa.select(workflows.c.id, workflows.c.idempotency_key)
            .where(_whole(request))
            .order_by(workflows.c.created_at)
            .limit(1)
        )
        if not found:
            break
        workflow_id, key = found[0]
        ids = [
            row.id
            for row in (
                yield Step(
                    sa.select(jobs.c.id)
                    .where(jobs.c.workflow_id == workflow_id)
                    .limit(budget - done)
                )
            )
        ]
        if ids:
            yield from _steps_deleted(ids)
            done += len(ids)
        left = yield Step(sa.select(jobs.c.id).where(jobs.c.workflow_id == workflow_id).limit(1))
        if not left:
            yield from _workflow_ended(workflow_id, key, request.now)
    return done


def step_rows_deleted(ids: list[UUID]) -> Plan[None]:
    """Delete the step rows of jobs ``ids`` and the edges into and out of them."""
    params = {"b_ids": ids}
    yield Step(sa.delete(workflow_edges).where(workflow_edges.c.parent_id.in_(_IDS)), params)
    yield Step(sa.delete(workflow_edges).where(workflow_edges.c.child_id.in_(_IDS)), params)
    yield Step(sa.delete(workflow_steps).where(workflow_steps.c.job_id.in_(_IDS)), params)


def _steps_deleted(ids: list[UUID]) -> Plan[None]:
    params = {"b_ids": ids}
    yield from step_rows_deleted(ids)
    yield Step(records_deleted(), params)
    yield Step(sa.delete(jobs).where(jobs.c.id.in_(_IDS)), params)


def _workflow_ended(workflow_id: UUID, key: str | None, now: int) -> Plan[None]:
    yield Step(sa.delete(workflow_signals).where(workflow_signals.c.workflow_id == workflow_id))
    if key is None:
        yield Step(sa.delete(workflows).where(workflows.c.id == workflow_id))
    else:
        yield Step(
            sa.update(workflows)
            .where(workflows.c.id == workflow_id)
            .values(pruned_at=now, updated_at=now)
        )


def expired_plan(before: int) -> Plan[None]:
    """Delete workflow tombstones pruned before ``before`` (their keys are free again)."""
    yield Step(sa.delete(workflows).where(workflows.c.pruned_at < before))


def workflow_count_plan(request: PruneRequest) -> Plan[int]:
    """How many steps a prune would take with whole workflows, unbounded."""
    if not request.cutoffs():
        return 0
    eligible = sa.select(workflows.c.id).where(_whole(request))
    counted = sa.select(sa.func.count()).where(jobs.c.workflow_id.in_(eligible))
    rows: list[Any] = yield Step(counted)
    return int(rows[0][0])
