"""How a workflow stands: the values :meth:`~caravel.DatabaseQueue.enqueue_workflow` and
``get_workflow`` return, and the one rule that turns step counts into a workflow's state."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal
from uuid import UUID

from caravel.clock import from_ms
from caravel.store.workflows.records import OnFailure, StepRecord, WorkflowRecord

__all__ = [
    "WorkflowResult",
    "WorkflowState",
    "WorkflowStatus",
    "WorkflowStep",
    "workflow_state",
    "workflow_status",
    "workflow_step",
]

#: ``running``: some step is ready, waiting or running; ``blocked``: a failed dependency
#: stopped a held step and nothing else is ready or running; ``completed``: every step
#: completed; ``failed``: every step finished, some dead-lettered or cancelled;
#: ``cancelled``: the workflow was cancelled and nothing is left to run.
WorkflowState = Literal["running", "blocked", "completed", "failed", "cancelled"]


@dataclass(frozen=True, slots=True)
class WorkflowResult:
    """An enqueued workflow: its id, each step's job ids (a group's by index) and whether its
    idempotency key named a workflow saved before (the ids are then that workflow's)."""

    workflow_id: UUID
    already_enqueued: bool
    step_ids: Mapping[str, tuple[UUID, ...]]


@dataclass(frozen=True, slots=True)
class WorkflowStep:
    """One step of a workflow: its job, name, index in its group (``None`` for a single step),
    state, whether it is held and blocked by a failed dependency, how many dependencies (and
    signal) it still waits for, its waits, and the job ids it runs after. ``result`` is its
    decoded result for the application's reads (``get_workflow`` on the queue), always ``None``
    in operators' reads."""

    job_id: UUID
    queue: str
    job_type: str
    step: str
    index: int | None
    state: str
    held: bool
    blocked: bool
    waiting: int
    on_failure: OnFailure
    wait_signal: str | None
    signal_received: bool
    delay: timedelta | None
    timeout: timedelta | None
    after: tuple[UUID, ...]
    result: Any = None


@dataclass(frozen=True, slots=True)
class WorkflowStatus:
    """A workflow and its steps (in the order added, a group's members by index); ``counts``
    says how many steps are in each of ``ready``, ``held`` (waiting, ``blocked`` ones
    included), ``blocked``, ``running``, ``completed``, ``dead_letter`` and ``cancelled``."""

    id: UUID
    name: str | None
    tenant_id: str
    state: WorkflowState
    total: int
    counts: Mapping[str, int]
    created_at: datetime
    finished_at: datetime | None
    cancelled_at: datetime | None
    steps: list[WorkflowStep]

    def step(self, name: str, index: int | None = None) -> WorkflowStep | None:
        """The step named ``name`` (member ``index`` of a group)."""
        return next((s for s in self.steps if (s.step, s.index) == (name, index)), None)


_COUNTED = ("ready", "held", "blocked", "running", "completed", "dead_letter", "cancelled")


def workflow_state(record: WorkflowRecord) -> WorkflowState:
    """The state the counts of ``record`` add up to (see :data:`WorkflowState`)."""
    live = record.ready + record.held + record.running  # ``held`` includes ``blocked``
    if record.cancelled_at is not None and live == 0:
        return "cancelled"
    if record.completed == record.total:
        return "completed"
    if live == 0:
        return "failed"
    if record.blocked and not record.ready and not record.running:
        return "blocked"
    return "running"


def workflow_step(record: StepRecord, result: Any = None) -> WorkflowStep:
    return WorkflowStep(
        job_id=record.job_id,
        queue=record.queue,
        job_type=record.job_type,
        step=record.step,
        index=record.index,
        state=record.state,
        held=record.held,
        blocked=record.blocked,
        waiting=record.waiting,
        on_failure=record.on_failure,
        wait_signal=record.wait_signal,
        signal_received=record.signal_received,
        delay=None if record.delay_ms is None else timedelta(milliseconds=record.delay_ms),
        timeout=None if record.timeout_ms is None else timedelta(milliseconds=record.timeout_ms),
        after=record.after,
        result=result,
    )


def workflow_status(record: WorkflowRecord, steps: list[WorkflowStep]) -> WorkflowStatus:
    return WorkflowStatus(
        id=record.id,
        name=record.name,
        tenant_id=record.tenant_id,
        state=workflow_state(record),
        total=record.total,
        counts={name: getattr(record, name) for name in _COUNTED},
        created_at=from_ms(record.created_at),
        finished_at=None if record.finished_at is None else from_ms(record.finished_at),
        cancelled_at=None if record.cancelled_at is None else from_ms(record.cancelled_at),
        steps=steps,
    )
