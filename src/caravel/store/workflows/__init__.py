"""Workflows: :mod:`~caravel.store.workflows.records` holds what the store takes and returns for
them (plain values, and the protocols every store implements), re-exported here. Only the records
are imported here, so naming them loads no SQLAlchemy."""

from caravel.store.workflows.records import (
    NewStep,
    NewWorkflow,
    OnFailure,
    StepDependency,
    StepRecord,
    StepResult,
    StepWait,
    WorkflowReads,
    WorkflowRecord,
    WorkflowWrites,
)

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
