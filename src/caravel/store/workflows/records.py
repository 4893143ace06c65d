"""What the store takes and returns for workflows: a graph of jobs (steps) where each runs once
its dependencies have finished. Plain values, like :mod:`caravel.store.values`.

A workflow's steps are inserted in one transaction. A step without dependencies or waits is an
ordinary ready job; every other step is *held* (due at :data:`~caravel.limits.HELD_DUE_AT`) and
has a row in the step table counting what it still waits for: one per unsatisfied dependency
edge, plus one while it waits for a signal. The statement that finishes a dependency satisfies
its edges and decrements those counters (a trigger, or on MariaDB the store's release pass), and
the decrement that reaches zero releases the step: O(1) work per finishing dependency and edge,
and exactly one release however many dependencies finish at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol
from uuid import UUID

from caravel.store.values import Committed, NewJob

__all__ = [
    "NewStep",
    "NewWorkflow",
    "OnFailure",
    "StepDependency",
    "StepRecord",
    "StepResult",
    "StepWait",
    "WorkflowReads",
    "WorkflowRecord",
    "WorkflowWrites",
]

#: What a failed (dead-lettered or cancelled) dependency does to a step: ``stop`` keeps the step
#: held (shown as blocked) until the dependency is replayed and completes; ``continue`` counts the
#: failure as finished, so the step runs and can see which dependency failed.
OnFailure = Literal["stop", "continue"]


@dataclass(frozen=True, slots=True)
class NewStep:
    """One step to insert: its validated job (the job's id is the step's id), its name, its
    place in an ``add_many`` group (``None`` for a single step), the job ids it runs after, and
    what it waits for besides them."""

    job: NewJob
    step: str
    index: int | None
    after: tuple[UUID, ...]
    on_failure: OnFailure = "stop"
    #: A signal this step also waits for (``queue.signal(workflow_id, name, ...)``), or ``None``.
    wait_signal: str | None = None
    #: Run no earlier than this many ms after its dependencies finished (a timer), or ``None``.
    delay_ms: int | None = None
    #: With ``wait_signal``: how long after its dependencies finished the step waits for the
    #: signal before it is released anyway (it then runs with ``timed_out`` set); ``None`` waits
    #: for ever.
    timeout_ms: int | None = None
    #: Chains: the step is handed its single dependency's result as ``previous_result``.
    hands_result: bool = False


@dataclass(frozen=True, slots=True)
class NewWorkflow:
    """A workflow to create. ``content_hash`` is the SHA-256 (hex) of the canonical graph (step
    names, types, payloads, dependencies, waits, options): the same idempotency key with another
    hash is a conflict. Times in ms since the epoch."""

    id: UUID
    tenant_id: str
    name: str | None
    idempotency_key: str | None
    content_hash: str
    created_at: int
    steps: Sequence[NewStep]


@dataclass(frozen=True, slots=True)
class WorkflowRecord:
    """A workflow's row and its steps' counts by state (``held`` counts ready steps still
    waiting; ``blocked`` the held ones a failed dependency stopped). ``finished_at`` is set once
    every step is in an end state; ``cancelled_at`` once it was cancelled."""

    id: UUID
    tenant_id: str
    name: str | None
    idempotency_key: str | None
    total: int
    ready: int
    held: int
    blocked: int
    running: int
    completed: int
    dead_letter: int
    cancelled: int
    created_at: int
    finished_at: int | None
    cancelled_at: int | None


@dataclass(frozen=True, slots=True)
class StepDependency:
    """One edge into a step: the dependency's job id, step name and index, its state, and
    whether the edge is satisfied."""

    job_id: UUID
    step: str
    index: int | None
    state: str
    satisfied: bool


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One step as operators see it (no payload, no result): its job, name, index, state,
    whether it is held, how many dependencies it still waits for, what it waits for besides
    them, and whether a failed dependency blocks it."""

    job_id: UUID
    queue: str
    job_type: str
    step: str
    index: int | None
    state: str
    held: bool
    waiting: int
    on_failure: OnFailure
    wait_signal: str | None
    signal_received: bool
    delay_ms: int | None
    timeout_ms: int | None
    blocked: bool
    after: tuple[UUID, ...]


@dataclass(frozen=True, slots=True)
class StepResult:
    """A step's outcome for the steps after it: its index in its group, its state, and its
    stored result as JSON text (``None`` when it has none)."""

    job_id: UUID
    index: int | None
    state: str
    result: str | None


@dataclass(frozen=True, slots=True)
class StepWait:
    """What a running step waited for: the signal's payload as JSON text if it arrived before
    the step was claimed, and whether the wait timed out instead."""

    signal: str | None
    signal_payload: str | None
    timed_out: bool


class WorkflowWrites(Protocol):
    """Creating, signalling and cancelling workflows."""

    async def workflow_insert(self, workflow: NewWorkflow) -> tuple[UUID, bool]:
        """Insert the workflow, its steps' jobs, step rows and edges in one transaction; its id
        and whether it was created. When ``idempotency_key`` names an existing workflow of the
        tenant with the same ``content_hash``, nothing is inserted and that workflow's id is
        returned; with another hash :class:`~caravel.errors.IdempotencyConflictError` is raised."""
        ...

    async def workflow_insert_joined(
        self, target: object, workflow: NewWorkflow, *, on_commit: Committed = None
    ) -> tuple[UUID, bool]:
        """:meth:`workflow_insert` in the transaction that ``target``, the caller's session or
        connection, has open (as ``job_insert_joined``); nothing is committed. ``on_commit``
        runs once that transaction commits (where ``target`` can say so), with the queues that
        got steps due at once. Stores without a caller's transaction (``memory://``) raise
        :class:`~caravel.errors.ValidationError` (field ``session``)."""
        ...

    def workflow_insert_joined_sync(
        self,
        target: object,
        workflow: NewWorkflow,
        identity: str,
        *,
        on_commit: Committed = None,
    ) -> tuple[UUID, bool]:
        """:meth:`workflow_insert_joined` on a blocking session or connection, given the
        database identity read before."""
        ...

    async def workflow_signal(
        self, workflow_id: UUID, tenant_id: str, name: str, payload: str, now: int
    ) -> bool:
        """Record signal ``name`` (payload as JSON text) for the tenant's workflow and release the
        steps that waited only for it; false (and nothing changed) when it was already recorded
        or there is no such workflow of that tenant."""
        ...

    async def workflow_cancel(self, workflow_id: UUID, tenant_id: str | None, now: int) -> int:
        """Cancel every step of the workflow that has not started (ready or held), and mark the
        workflow cancelled; how many steps were cancelled. Running steps get the cancel request
        jobs get."""
        ...


class WorkflowReads(Protocol):
    """Reading workflows (operators' tools read these too)."""

    async def workflow_get(self, workflow_id: UUID, tenant_id: str | None) -> WorkflowRecord | None:
        """The workflow of this exact tenant (any tenant when ``None``)."""
        ...

    async def workflow_list(
        self, tenant_id: str | None, limit: int, offset: int = 0
    ) -> list[WorkflowRecord]:
        """Workflows newest first."""
        ...

    async def workflow_steps(
        self, workflow_id: UUID, tenant_id: str | None, limit: int, offset: int = 0
    ) -> list[StepRecord]:
        """The workflow's steps in insertion order (by step name, then index)."""
        ...

    async def workflow_results(
        self,
        workflow_id: UUID,
        tenant_id: str,
        step: str,
        after_index: int | None,
        limit: int,
    ) -> list[StepResult]:
        """One page of the results of step ``step`` (a group's members by index, after
        ``after_index``); keyset paging so a 10,000-member group is never read at once."""
        ...

    async def workflow_dependencies(
        self, job_id: UUID, failed_only: bool, limit: int
    ) -> list[StepDependency]:
        """The edges into step ``job_id`` (only those whose dependency is dead-lettered or
        cancelled when ``failed_only``)."""
        ...

    async def workflow_wait(self, job_id: UUID) -> StepWait | None:
        """What step ``job_id`` waited for (``None`` when it waited for no signal)."""
        ...
