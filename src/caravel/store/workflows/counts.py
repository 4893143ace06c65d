"""A workflow's steps counted by state, on the SQL stores: one ``GROUP BY`` over the workflows'
stretch of ``ix_caravel_jobs_workflow`` (no counter row that every finish would rewrite), and
the blocked steps found from the failed ones' outgoing edges, so the count reads what failed,
not the whole graph."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from caravel.limits import HELD_DUE_AT
from caravel.store.plans import Plan, Step
from caravel.store.schema import jobs, workflow_edges
from caravel.store.workflows.records import WorkflowRecord

__all__ = ["StepCounts", "counts_plan", "record_of"]

_LIVE = ("ready", "running")
_STATES = ("running", "completed", "dead_letter", "cancelled")


@dataclass
class StepCounts:
    """One workflow's steps by state (``held`` includes ``blocked``), and its latest finish."""

    ready: int = 0
    held: int = 0
    blocked: int = 0
    running: int = 0
    completed: int = 0
    dead_letter: int = 0
    cancelled: int = 0
    last_finished_at: int | None = None


def counts_plan(workflow_ids: Sequence[UUID]) -> Plan[dict[UUID, StepCounts]]:
    """The counts of each of ``workflow_ids``."""
    counts = {workflow_id: StepCounts() for workflow_id in workflow_ids}
    if not counts:
        return counts
    held = jobs.c.due_at == HELD_DUE_AT
    grouped = (
        sa.select(
            jobs.c.workflow_id,
            jobs.c.state,
            held.label("held"),
            sa.func.count().label("n"),
            sa.func.max(jobs.c.finished_at).label("last"),
        )
        .where(jobs.c.workflow_id.in_(list(counts)))
        .group_by(jobs.c.workflow_id, jobs.c.state, held)
    )
    for row in (yield Step(grouped)):
        found = counts[row.workflow_id]
        if row.state == "ready":
            if row.held:
                found.held += row.n
            else:
                found.ready += row.n
        elif row.state in _STATES:
            setattr(found, row.state, getattr(found, row.state) + row.n)
        if row.last is not None and (found.last_finished_at or 0) < row.last:
            found.last_finished_at = row.last
    failed = jobs.alias("failed")
    child = jobs.alias("child")
    blocked = (
        sa.select(
            failed.c.workflow_id,
            sa.func.count(sa.distinct(workflow_edges.c.child_id)).label("n"),
        )
        .join(workflow_edges, workflow_edges.c.parent_id == failed.c.id)
        .join(child, child.c.id == workflow_edges.c.child_id)
        .where(
            failed.c.workflow_id.in_(list(counts)),
            failed.c.state.in_(("dead_letter", "cancelled")),
            ~workflow_edges.c.satisfied,
            child.c.state == "ready",
            child.c.due_at == HELD_DUE_AT,
        )
        .group_by(failed.c.workflow_id)
    )
    for row in (yield Step(blocked)):
        counts[row.workflow_id].blocked = row.n
    return counts


def record_of(row: Any, counts: StepCounts) -> WorkflowRecord:
    """A workflow's record from its row and its counts: finished once no step is live."""
    live = counts.ready + counts.held + counts.running
    return WorkflowRecord(
        id=row.id,
        tenant_id=row.tenant_id,
        name=row.name,
        idempotency_key=row.idempotency_key,
        total=row.total,
        ready=counts.ready,
        held=counts.held,
        blocked=counts.blocked,
        running=counts.running,
        completed=counts.completed,
        dead_letter=counts.dead_letter,
        cancelled=counts.cancelled,
        created_at=row.created_at,
        finished_at=counts.last_finished_at if live == 0 else None,
        cancelled_at=row.cancelled_at,
    )
