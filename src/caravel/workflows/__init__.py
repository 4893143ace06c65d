"""Workflows: a graph of jobs (steps) where each runs once the steps it runs after have
finished, with their results, failure policies and waits for signals and timers.

A workflow is enqueued in one transaction: steps without dependencies or waits are ready at
once, every other step is *held* with a counter of what it still waits for. The statement that
finishes a dependency decrements its dependents' counters, and the one that reaches zero
releases the step, so each step is released exactly once however many dependencies finish
together (see the workflows guide and :mod:`caravel.store.workflows.records`).
"""

from caravel.workflows.builder import StepSpec, Workflow
from caravel.workflows.context import (
    FailedDependency,
    StepOutcome,
    WaitOutcome,
    WorkflowContext,
    workflow_of,
)
from caravel.workflows.preparation import prepare_workflow, step_ids
from caravel.workflows.status import (
    WorkflowResult,
    WorkflowState,
    WorkflowStatus,
    WorkflowStep,
    workflow_state,
    workflow_status,
    workflow_step,
)

__all__ = [
    "FailedDependency",
    "StepOutcome",
    "StepSpec",
    "WaitOutcome",
    "Workflow",
    "WorkflowContext",
    "WorkflowResult",
    "WorkflowState",
    "WorkflowStatus",
    "WorkflowStep",
    "prepare_workflow",
    "step_ids",
    "workflow_of",
    "workflow_state",
    "workflow_status",
    "workflow_step",
]
