"""Workflows in the in-memory tables: the rows of ``caravel_workflows``, ``caravel_workflow_steps``,
``caravel_workflow_edges`` and ``caravel_workflow_signals``, and the release the SQL stores'
triggers do in the statement that changes a step's state (:meth:`WorkflowTables.finished`,
called from :meth:`~caravel.store.memory.tables.Tables.track`).

The rules, which the SQL stores match:

- A dead-lettered or cancelled step put back to wait (a replay) unsatisfies the edges its
  failure satisfied into steps not released yet: they wait for its new outcome.
- A finishing dependency satisfies its unsatisfied edges: every one when it completed, those
  into ``continue`` steps when it was dead-lettered or cancelled. Each satisfied edge takes one
  off its child's ``waiting``; an edge is satisfied once, so a replayed dependency that
  completes later releases a ``stop`` child then and a ``continue`` child never twice.
- A held child whose ``waiting`` reaches 0 is released, due ``delay_ms`` after the release.
- A held child left waiting only for its signal (``waiting`` 1, signal not received) that has a
  ``timeout_ms`` is released due ``timeout_ms`` later; it runs with ``timed_out`` unless the
  signal comes before it is claimed.
- A signal received by a step still ``ready`` takes one off its ``waiting``; at 0 the step is
  due at ``max(now, (released_at or now) + delay_ms)``. A step already claimed or finished is
  left alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from uuid import UUID

from caravel.limits import HELD_DUE_AT
from caravel.store.workflows.records import NewStep, NewWorkflow, OnFailure

if TYPE_CHECKING:
    from caravel.store.memory.tables import JobRow, Tables

__all__ = ["EdgeRow", "StepRow", "WorkflowRow", "WorkflowTables", "is_held", "step_upstream"]

_FAILED = ("dead_letter", "cancelled")


@dataclass(slots=True)
class WorkflowRow:
    """One workflow, column for column as ``caravel_workflows`` holds it."""

    id: UUID
    tenant_id: str
    name: str | None
    idempotency_key: str | None
    content_hash: str
    total: int
    created_at: int
    updated_at: int
    cancelled_at: int | None = None
    #: The workflow's step ids, in insertion order (the ``(workflow_id, ...)`` index).
    steps: list[UUID] = field(default_factory=list)


@dataclass(slots=True)
class StepRow:
    """One step, column for column as ``caravel_workflow_steps`` holds it."""

    job_id: UUID
    workflow_id: UUID
    step: str
    step_index: int | None
    waiting: int
    on_failure: OnFailure
    wait_signal: str | None
    delay_ms: int | None
    timeout_ms: int | None
    signal_received_at: int | None = None
    released_at: int | None = None


@dataclass(slots=True)
class EdgeRow:
    """One dependency, column for column as ``caravel_workflow_edges`` holds it."""

    parent_id: UUID
    child_id: UUID
    workflow_id: UUID
    runs_after_failure: bool
    hands_result: bool
    satisfied: bool = False


def is_held(job: JobRow) -> bool:
    return job.state == "ready" and job.due_at == HELD_DUE_AT


def step_upstream(workflow_id: UUID, step: NewStep) -> str:
    """The ``upstream`` a step's job is inserted with: which workflow and step it is."""
    found = {"id": str(workflow_id), "step": step.step, "index": step.index}
    return json.dumps({"workflow": found}, separators=(",", ":"))


class WorkflowTables:
    """The workflow tables of one in-memory queue (under the queue's lock)."""

    def __init__(self) -> None:
        self.workflows: dict[UUID, WorkflowRow] = {}
        #: The unique ``(tenant_id, idempotency_key)`` index.
        self.keys: dict[tuple[str, str], UUID] = {}
        self.steps: dict[UUID, StepRow] = {}
        #: Edges by parent (the release's walk) and by child (a step's dependencies).
        self.edges_out: dict[UUID, list[EdgeRow]] = {}
        self.edges_in: dict[UUID, list[EdgeRow]] = {}
        #: ``caravel_workflow_signals``: (workflow_id, name) -> (payload, received_at).
        self.signals: dict[tuple[UUID, str], tuple[str, int]] = {}
        #: A pruned keyed workflow's key: (tenant, key) -> (id, content_hash, pruned_at), so a
        #: repeat still returns its id and other content still conflicts, as jobs' tombstones.
        self.tombstones: dict[tuple[str, str], tuple[UUID, str, int]] = {}

    def add_graph(self, workflow: NewWorkflow) -> list[StepRow]:
        """Add the workflow's row, its step rows and edges (not its jobs); the step rows."""
        row = WorkflowRow(
            id=workflow.id,
            tenant_id=workflow.tenant_id,
            name=workflow.name,
            idempotency_key=workflow.idempotency_key,
            content_hash=workflow.content_hash,
            total=len(workflow.steps),
            created_at=workflow.created_at,
            updated_at=workflow.created_at,
        )
        self.workflows[workflow.id] = row
        added = []
        for new in workflow.steps:
            step = StepRow(
                job_id=new.job.id,
                workflow_id=workflow.id,
                step=new.step,
                step_index=new.index,
                waiting=len(new.after) + (new.wait_signal is not None),
                on_failure=new.on_failure,
                wait_signal=new.wait_signal,
                delay_ms=new.delay_ms,
                timeout_ms=new.timeout_ms,
            )
            self.steps[step.job_id] = step
            row.steps.append(step.job_id)
            added.append(step)
            for parent in new.after:
                edge = EdgeRow(
                    parent, step.job_id, workflow.id, new.on_failure == "continue", new.hands_result
                )
                self.edges_out.setdefault(parent, []).append(edge)
                self.edges_in.setdefault(step.job_id, []).append(edge)
        return added

    def step_pruned(self, job_id: UUID, workflow_id: UUID, now: int) -> None:
        """Step ``job_id`` was pruned: its step row and edges go, and with the workflow's last
        step the workflow's rows (its key kept as a tombstone)."""
        self.steps.pop(job_id, None)
        for edge in self.edges_in.pop(job_id, []):
            self.edges_out.get(edge.parent_id, []).remove(edge)
        for edge in self.edges_out.pop(job_id, []):
            self.edges_in.get(edge.child_id, []).remove(edge)
        workflow = self.workflows.get(workflow_id)
        if workflow is None or any(step in self.steps for step in workflow.steps):
            return
        del self.workflows[workflow_id]
        for signal in [s for s in self.signals if s[0] == workflow_id]:
            del self.signals[signal]
        if workflow.idempotency_key is not None:
            key = (workflow.tenant_id, workflow.idempotency_key)
            del self.keys[key]
            self.tombstones[key] = (workflow_id, workflow.content_hash, now)

    def expire_tombstones(self, before: int) -> None:
        for key, (_, _, pruned_at) in list(self.tombstones.items()):
            if pruned_at < before:
                del self.tombstones[key]

    def finished(self, tables: Tables, row: JobRow, old: str) -> None:
        """What the trigger does when step ``row`` changed state from ``old``: satisfy its
        edges and release the steps whose last wait that was; or, replayed, take back what its
        failure satisfied for steps not released yet."""
        if row.state == "completed":
            failed = False
        elif row.state in _FAILED:
            failed = True
        else:
            if old in _FAILED and row.state != "pruned":
                self._taken_back(row)
            return
        now = row.updated_at
        for edge in self.edges_out.get(row.id, ()):
            if edge.satisfied or (failed and not edge.runs_after_failure):
                continue
            edge.satisfied = True
            step = self.steps.get(edge.child_id)
            if step is None:
                continue
            step.waiting -= 1
            handed = row.result if edge.hands_result else None
            self.settle(tables, step, now, handed, hands=edge.hands_result)

    def _taken_back(self, row: JobRow) -> None:
        for edge in self.edges_out.get(row.id, ()):
            step = self.steps.get(edge.child_id)
            if not (edge.satisfied and edge.runs_after_failure) or step is None:
                continue
            if step.released_at is None:
                edge.satisfied = False
                step.waiting += 1

    def settle(
        self, tables: Tables, step: StepRow, now: int, handed: str | None = None, *, hands: bool
    ) -> None:
        """Release held ``step`` if nothing but (at most) a timed signal holds it any more."""
        job = tables.jobs.get(step.job_id)
        if job is None or not is_held(job):
            return
        if step.waiting == 0:
            due = now + (step.delay_ms or 0)
        elif self.timed_out_only(step):
            assert step.timeout_ms is not None
            due = now + step.timeout_ms
        else:
            return
        if hands:
            found = json.loads(job.upstream) if job.upstream else {}
            found["result"] = None if handed is None else json.loads(handed)
            job.upstream = json.dumps(found, separators=(",", ":"))
        outcome = tables.batch_outcome(job)
        if outcome is not None:
            job.upstream = outcome
        job.due_at = job.available_at = due
        job.updated_at = now
        step.released_at = now
        tables.track(job)

    @staticmethod
    def timed_out_only(step: StepRow) -> bool:
        """Whether only ``step``'s signal holds it, and the signal's wait has a timeout."""
        return (
            step.waiting == 1
            and step.wait_signal is not None
            and step.signal_received_at is None
            and step.timeout_ms is not None
        )

    def blocked(self, tables: Tables, step: StepRow) -> bool:
        """Whether held ``step`` waits on a dependency that was dead-lettered or cancelled."""
        job = tables.jobs.get(step.job_id)
        if job is None or not is_held(job):
            return False
        for edge in self.edges_in.get(step.job_id, ()):
            parent = tables.jobs.get(edge.parent_id)
            if not edge.satisfied and parent is not None and parent.state in _FAILED:
                return True
        return False
