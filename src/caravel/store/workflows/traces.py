"""A workflow's enqueue as one trace: the workflow a root span, each step a span linked to the
steps it runs after, and each step's jobs carrying their step span's context
(:func:`caravel.telemetry.workflow_trace` opens them; this module hands it the graph as plain
values and puts the contexts on the jobs).

A group of ``add_many`` members is one step, so one span: a fan-in after 10,000 members has one
link, not 10,000, and every member's run is a child of the group's span.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from uuid import UUID

from caravel import telemetry
from caravel.store.workflows.records import NewStep, NewWorkflow

__all__ = ["TracedWorkflow", "traced_workflow"]


@dataclass(frozen=True, slots=True)
class TracedWorkflow:
    """The workflow to insert (its jobs carrying their step's trace context, when tracing) and
    :meth:`inserted`, which tells the root span what the insert did."""

    workflow: NewWorkflow
    trace: telemetry.WorkflowTrace

    def inserted(self, workflow_id: UUID, created: bool) -> None:
        self.trace.inserted(workflow_id, created)


@contextmanager
def traced_workflow(workflow: NewWorkflow) -> Iterator[TracedWorkflow]:
    """The spans of ``workflow``'s enqueue, open around the insert; without a tracer provider
    the workflow is handed through unchanged."""
    if not telemetry.tracing():
        yield TracedWorkflow(workflow, telemetry.WorkflowTrace.off())
        return
    with telemetry.workflow_trace(workflow.id, workflow.name, _step_spans(workflow)) as spans:
        yield TracedWorkflow(_with_carriers(workflow, spans.carriers), spans)


def _step_spans(workflow: NewWorkflow) -> list[telemetry.WorkflowStepSpan]:
    """One entry per step name, in the order the steps were added, with the names of the
    steps its jobs run after."""
    name_of = {one.job.id: one.step for one in workflow.steps}
    first: dict[str, NewStep] = {}
    members: dict[str, int] = {}
    after: dict[str, dict[str, None]] = {}
    for one in workflow.steps:
        first.setdefault(one.step, one)
        members[one.step] = members.get(one.step, 0) + 1
        names = after.setdefault(one.step, {})
        for job_id in one.after:
            before = name_of.get(job_id)
            if before is not None:
                names[before] = None
    return [
        telemetry.WorkflowStepSpan(
            step=name,
            queue=one.job.queue,
            members=members[name],
            job_id=one.job.id if one.index is None else None,
            after=list(after[name]),
        )
        for name, one in first.items()
    ]


def _with_carriers(workflow: NewWorkflow, carriers: Mapping[str, str]) -> NewWorkflow:
    if not carriers:
        return workflow
    steps = [
        one
        if one.job.trace_context is not None or one.step not in carriers
        else dataclasses.replace(one, job=one.job._replace(trace_context=carriers[one.step]))
        for one in workflow.steps
    ]
    return dataclasses.replace(workflow, steps=steps)
