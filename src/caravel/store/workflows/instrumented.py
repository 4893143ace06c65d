"""The workflow operations of :class:`~caravel.store.instrumented.InstrumentedStore`: a client
span per operation, and for an insert the workflow's trace (:mod:`caravel.store.workflows.traces`)
and the counts every enqueue has."""

from __future__ import annotations

from collections import Counter
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING
from uuid import UUID

from caravel import telemetry
from caravel.store.values import Committed
from caravel.store.workflows.records import (
    NewWorkflow,
    StepDependency,
    StepRecord,
    StepResult,
    StepWait,
    WorkflowRecord,
)
from caravel.store.workflows.traces import traced_workflow

if TYPE_CHECKING:
    from caravel.store.protocol import Store

__all__ = ["InstrumentedWorkflows"]


class InstrumentedWorkflows:
    """Mixed into the instrumented store, whose ``inner`` and ``_span`` it uses."""

    inner: Store

    def _span(self, operation: str) -> AbstractContextManager[telemetry.Span]:
        raise NotImplementedError  # the instrumented store's

    async def workflow_insert(self, workflow: NewWorkflow) -> tuple[UUID, bool]:
        # One trace for the workflow: a root span, a span per step linked to its dependencies,
        # each step's jobs carrying its step's context (caravel.store.workflows.traces).
        with traced_workflow(workflow) as traced:
            with self._span("workflow_insert"):
                found, created = await self.inner.workflow_insert(traced.workflow)
            traced.inserted(found, created)
        _count_enqueued(workflow, created)
        return found, created

    async def workflow_insert_joined(
        self, target: object, workflow: NewWorkflow, *, on_commit: Committed = None
    ) -> tuple[UUID, bool]:
        with traced_workflow(workflow) as traced:
            with self._span("workflow_insert_joined"):
                found, created = await self.inner.workflow_insert_joined(
                    target, traced.workflow, on_commit=on_commit
                )
            traced.inserted(found, created)
        _count_enqueued(workflow, created)
        return found, created

    def workflow_insert_joined_sync(
        self,
        target: object,
        workflow: NewWorkflow,
        identity: str,
        *,
        on_commit: Committed = None,
    ) -> tuple[UUID, bool]:
        with traced_workflow(workflow) as traced:
            with self._span("workflow_insert_joined"):
                found, created = self.inner.workflow_insert_joined_sync(
                    target, traced.workflow, identity, on_commit=on_commit
                )
            traced.inserted(found, created)
        _count_enqueued(workflow, created)
        return found, created

    async def workflow_signal(
        self, workflow_id: UUID, tenant_id: str, name: str, payload: str, now: int
    ) -> bool:
        with self._span("workflow_signal"):
            return await self.inner.workflow_signal(workflow_id, tenant_id, name, payload, now)

    async def workflow_cancel(self, workflow_id: UUID, tenant_id: str | None, now: int) -> int:
        with self._span("workflow_cancel"):
            return await self.inner.workflow_cancel(workflow_id, tenant_id, now)

    async def workflow_get(self, workflow_id: UUID, tenant_id: str | None) -> WorkflowRecord | None:
        with self._span("workflow_get"):
            return await self.inner.workflow_get(workflow_id, tenant_id)

    async def workflow_list(
        self, tenant_id: str | None, limit: int, offset: int = 0
    ) -> list[WorkflowRecord]:
        with self._span("workflow_list"):
            return await self.inner.workflow_list(tenant_id, limit, offset)

    async def workflow_steps(
        self, workflow_id: UUID, tenant_id: str | None, limit: int, offset: int = 0
    ) -> list[StepRecord]:
        with self._span("workflow_steps"):
            return await self.inner.workflow_steps(workflow_id, tenant_id, limit, offset)

    async def workflow_results(
        self,
        workflow_id: UUID,
        tenant_id: str,
        step: str,
        after_index: int | None,
        limit: int,
    ) -> list[StepResult]:
        with self._span("workflow_results"):
            return await self.inner.workflow_results(
                workflow_id, tenant_id, step, after_index, limit
            )

    async def workflow_dependencies(
        self, job_id: UUID, failed_only: bool, limit: int
    ) -> list[StepDependency]:
        with self._span("workflow_dependencies"):
            return await self.inner.workflow_dependencies(job_id, failed_only, limit)

    async def workflow_wait(self, job_id: UUID) -> StepWait | None:
        with self._span("workflow_wait"):
            return await self.inner.workflow_wait(job_id)


def _count_enqueued(workflow: NewWorkflow, created: bool) -> None:
    counts = Counter((step.job.queue, step.job.job_type) for step in workflow.steps)
    for (queue, job_type), count in counts.items():
        telemetry.record_enqueued(queue, job_type, repeated=not created, count=count)
