"""What a job's run ended with, as the testing helpers report it: the worker's step (claim,
outcome, acknowledgement) turned into a small value a test can compare."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from uuid import UUID

from caravel.worker.service import Step

__all__ = ["JobRun", "RunOutcome", "job_run"]

RunOutcome = Literal["completed", "retrying", "snoozed", "dead_letter", "abandoned", "lease_lost"]


@dataclass(frozen=True, slots=True)
class JobRun:
    """One attempt a helper ran through the worker, and how it ended.

    ``outcome`` is ``"completed"``, ``"retrying"`` (failed, a retry is scheduled),
    ``"snoozed"`` (the handler raised :class:`~caravel.Snooze`), ``"dead_letter"`` (failed on
    its last attempt, or discarded), ``"abandoned"`` (cancelled without an
    acknowledgement: its lease ran out) or ``"lease_lost"`` (a newer lease fenced the outcome
    off). ``failure`` is the stored failure category, ``error_type`` the handler's exception
    class name and ``detail`` the failure's safe detail as the attempt's record keeps it (see
    :class:`~caravel.JobFailed`); the exception's message is never kept, as in the database.
    """

    job_id: UUID
    queue: str
    tenant_id: str
    job_type: str
    attempt: int
    outcome: RunOutcome
    failure: str | None = None
    error_type: str | None = None
    detail: str | None = None


def job_run(step: Step) -> JobRun:
    """The run :meth:`~caravel.QueueWorker.step` reported."""
    claimed, outcome = step.claimed, step.outcome
    failure = None if outcome is None else outcome.category
    error = None if outcome is None or outcome.error is None else type(outcome.error).__name__
    result: RunOutcome
    if outcome is None:
        result = "abandoned"
    elif not step.held:
        result = "lease_lost"
    elif outcome.snooze_ms is not None:
        result = "snoozed"
    elif failure is None:
        result = "completed"
    elif outcome.final or claimed.attempt >= claimed.lease.max_attempts:
        result = "dead_letter"
    else:
        result = "retrying"
    return JobRun(
        job_id=claimed.job_id,
        queue=claimed.queue,
        tenant_id=claimed.tenant_id,
        job_type=claimed.job_type,
        attempt=claimed.attempt,
        outcome=result,
        failure=failure,
        error_type=error,
        detail=None if outcome is None else outcome.detail,
    )
