"""Workflows over the in-memory tables, as the SQL stores do them (the rules are in
:mod:`caravel.store.memory.workflow_tables`). The reference the SQL stores' conformance tests
hold them to."""

from __future__ import annotations

from collections.abc import Iterator
from uuid import UUID

from caravel.errors import IdempotencyConflictError
from caravel.limits import HELD_DUE_AT
from caravel.store.memory.links import MemoryLinkReads, MemoryLinks
from caravel.store.memory.removal import cancel_row
from caravel.store.memory.tables import JobRow, Tables
from caravel.store.memory.workflow_tables import (
    StepRow,
    WorkflowRow,
    WorkflowTables,
    is_held,
    step_upstream,
)
from caravel.store.workflows.records import (
    NewWorkflow,
    StepDependency,
    StepRecord,
    StepResult,
    StepWait,
    WorkflowRecord,
)

__all__ = ["MemoryWorkflowReads", "MemoryWorkflows"]

_LIVE = ("ready", "running")


def _order(step: StepRow) -> tuple[str, int]:
    return (step.step, -1 if step.step_index is None else step.step_index)


def _steps_of(flows: WorkflowTables, workflow: WorkflowRow) -> list[StepRow]:
    return sorted((flows.steps[job_id] for job_id in workflow.steps), key=_order)


def _record(tables: Tables, workflow: WorkflowRow) -> WorkflowRecord:
    flows = tables.workflows
    counts = dict.fromkeys(
        ("ready", "held", "blocked", "running", "completed", "dead_letter", "cancelled"), 0
    )
    live, finished_at = False, None
    for job_id in workflow.steps:
        job = tables.jobs.get(job_id)
        if job is None:
            continue
        state = job.state
        if state == "ready" and is_held(job):
            state = "held"  # blocked ones included, and counted apart too
            counts["blocked"] += flows.blocked(tables, flows.steps[job_id])
        if state in counts:
            counts[state] += 1
        live = live or job.state in _LIVE
        if job.finished_at is not None:
            finished_at = max(finished_at or 0, job.finished_at)
    return WorkflowRecord(
        id=workflow.id,
        tenant_id=workflow.tenant_id,
        name=workflow.name,
        idempotency_key=workflow.idempotency_key,
        total=workflow.total,
        created_at=workflow.created_at,
        finished_at=None if live else finished_at,
        cancelled_at=workflow.cancelled_at,
        **counts,
    )


def _owned(tables: Tables, workflow_id: UUID, tenant_id: str | None) -> WorkflowRow | None:
    found = tables.workflows.workflows.get(workflow_id)
    if found is None or tenant_id not in (None, found.tenant_id):
        return None
    return found


class MemoryWorkflowReads(MemoryLinkReads):
    """Reading workflows."""

    async def workflow_get(self, workflow_id: UUID, tenant_id: str | None) -> WorkflowRecord | None:
        with self._locked("workflow_get") as tables:
            found = _owned(tables, workflow_id, tenant_id)
            return None if found is None else _record(tables, found)

    async def workflow_list(
        self, tenant_id: str | None, limit: int, offset: int = 0
    ) -> list[WorkflowRecord]:
        with self._locked("workflow_list") as tables:
            rows = [
                row
                for row in tables.workflows.workflows.values()
                if tenant_id in (None, row.tenant_id)
            ]
            rows.sort(key=lambda row: (row.created_at, row.id), reverse=True)
            return [_record(tables, row) for row in rows[offset : offset + limit]]

    async def workflow_steps(
        self, workflow_id: UUID, tenant_id: str | None, limit: int, offset: int = 0
    ) -> list[StepRecord]:
        with self._locked("workflow_steps") as tables:
            found = _owned(tables, workflow_id, tenant_id)
            if found is None:
                return []
            flows = tables.workflows
            steps = _steps_of(flows, found)[offset : offset + limit]
            return [
                _step_record(tables, step, tables.jobs[step.job_id])
                for step in steps
                if step.job_id in tables.jobs
            ]

    async def workflow_results(
        self,
        workflow_id: UUID,
        tenant_id: str,
        step: str,
        after_index: int | None,
        limit: int,
    ) -> list[StepResult]:
        with self._locked("workflow_results") as tables:
            found = _owned(tables, workflow_id, tenant_id)
            if found is None:
                return []
            page = [
                one
                for one in _steps_of(tables.workflows, found)
                if one.step == step
                and (after_index is None or (one.step_index or 0) > after_index)
                and one.job_id in tables.jobs
            ][:limit]
            return [_result(tables.jobs[one.job_id], one) for one in page]

    async def workflow_dependencies(
        self, job_id: UUID, failed_only: bool, limit: int
    ) -> list[StepDependency]:
        with self._locked("workflow_dependencies") as tables:
            flows = tables.workflows
            found = []
            for edge in flows.edges_in.get(job_id, ()):
                parent, step = tables.jobs.get(edge.parent_id), flows.steps.get(edge.parent_id)
                if parent is None or step is None:
                    continue
                if failed_only and parent.state not in ("dead_letter", "cancelled"):
                    continue
                found.append(
                    StepDependency(
                        parent.id, step.step, step.step_index, parent.state, edge.satisfied
                    )
                )
            found.sort(key=lambda d: (d.step, -1 if d.index is None else d.index))
            return found[:limit]

    async def workflow_wait(self, job_id: UUID) -> StepWait | None:
        with self._locked("workflow_wait") as tables:
            step = tables.workflows.steps.get(job_id)
            if step is None or step.wait_signal is None:
                return None
            if step.signal_received_at is None:
                return StepWait(None, None, timed_out=True)
            payload, _ = tables.workflows.signals[(step.workflow_id, step.wait_signal)]
            return StepWait(step.wait_signal, payload, timed_out=False)


class MemoryWorkflows(MemoryWorkflowReads, MemoryLinks):
    """Creating, signalling and cancelling workflows."""

    async def workflow_insert(self, workflow: NewWorkflow) -> tuple[UUID, bool]:
        with self._locked("workflow_insert") as tables:
            flows = tables.workflows
            key = workflow.idempotency_key
            if key is not None:
                holder = flows.keys.get((workflow.tenant_id, key))
                if holder is not None:
                    if flows.workflows[holder].content_hash != workflow.content_hash:
                        raise IdempotencyConflictError(holder)
                    return holder, False
                pruned = flows.tombstones.get((workflow.tenant_id, key))
                if pruned is not None:
                    if pruned[1] != workflow.content_hash:
                        raise IdempotencyConflictError(pruned[0])
                    return pruned[0], False
                flows.keys[(workflow.tenant_id, key)] = workflow.id
            _insert(tables, workflow)
        return workflow.id, True

    async def workflow_signal(
        self, workflow_id: UUID, tenant_id: str, name: str, payload: str, now: int
    ) -> bool:
        with self._locked("workflow_signal") as tables:
            flows = tables.workflows
            found = _owned(tables, workflow_id, tenant_id)
            if found is None or (workflow_id, name) in flows.signals:
                return False
            flows.signals[(workflow_id, name)] = (payload, now)
            for step in _waiting_for(tables, found, name):
                step.signal_received_at = now
                step.waiting -= 1
                job = tables.jobs[step.job_id]
                if step.waiting == 0:
                    start = now if step.released_at is None else step.released_at
                    job.due_at = job.available_at = max(now, start + (step.delay_ms or 0))
                    job.updated_at = now
                    step.released_at = start
                    tables.track(job)
            found.updated_at = now
        return True

    async def workflow_cancel(self, workflow_id: UUID, tenant_id: str | None, now: int) -> int:
        with self._locked("workflow_cancel") as tables:
            found = _owned(tables, workflow_id, tenant_id)
            if found is None:
                return 0
            cancelled = 0
            for job_id in found.steps:
                job = tables.jobs.get(job_id)
                if job is not None and job.state in ("ready", "running"):
                    cancelled += 1
                    cancel_row(tables, job, now)
            found.cancelled_at = found.cancelled_at or now
            found.updated_at = now
            return cancelled


def _waiting_for(tables: Tables, workflow: WorkflowRow, name: str) -> Iterator[StepRow]:
    """The steps of ``workflow`` still waiting for signal ``name`` and not yet claimed."""
    for job_id in workflow.steps:
        step = tables.workflows.steps[job_id]
        if step.wait_signal != name or step.signal_received_at is not None:
            continue
        job = tables.jobs.get(job_id)
        if job is not None and job.state == "ready":
            yield step


def _insert(tables: Tables, workflow: NewWorkflow) -> None:
    """Add the workflow's row, its steps' jobs (held unless nothing holds them), steps and
    edges."""
    flows, now = tables.workflows, workflow.created_at
    for new, step in zip(workflow.steps, flows.add_graph(workflow), strict=True):
        job = JobRow.new(new.job)
        job.workflow_id = workflow.id
        job.upstream = step_upstream(workflow.id, new)
        job.due_at = job.available_at = HELD_DUE_AT
        tables.add(job)
        flows.settle(tables, step, now, hands=False)


def _step_record(tables: Tables, step: StepRow, job: JobRow) -> StepRecord:
    flows = tables.workflows
    return StepRecord(
        job_id=job.id,
        queue=job.queue,
        job_type=job.job_type,
        step=step.step,
        index=step.step_index,
        state=job.state,
        held=is_held(job),
        waiting=step.waiting,
        on_failure=step.on_failure,
        wait_signal=step.wait_signal,
        signal_received=step.signal_received_at is not None,
        delay_ms=step.delay_ms,
        timeout_ms=step.timeout_ms,
        blocked=flows.blocked(tables, step),
        after=tuple(edge.parent_id for edge in flows.edges_in.get(step.job_id, ())),
    )


def _result(job: JobRow, step: StepRow) -> StepResult:
    return StepResult(job.id, step.step_index, job.state, job.result)
