"""Django's ``TaskResult`` from Caravel's stored state.

The result id is ``<queue>:<job id>``: the queue is part of every lookup of ours, so the id
carries it. Caravel states map onto Django's four: ``ready`` is READY (waiting, delayed or due
for a retry), ``running`` is RUNNING, ``completed`` is SUCCESSFUL, and ``dead_letter`` and
``cancelled`` are FAILED. ``worker_ids`` holds one placeholder per attempt, so
``TaskResult.attempts`` and the task context's ``attempt`` count right (the workers are in the
attempt history, not read here). Caravel stores when the latest attempt started, so
``started_at`` and ``last_attempted_at`` are both that time (the same on a first attempt, as
Django's are). Errors carry the exception's class path and, as their ``traceback``, one line
``module.Class: detail`` when the task marked a detail safe (a traceback's last line, its frames
left out and the safe detail in place of the message; see :class:`~caravel.JobFailed`), else an
empty one: exception messages and tracebacks never reach the queue's rows. A stored result has
one error per failed attempt the job's history keeps (:meth:`~caravel.DatabaseQueue.get_attempts`),
oldest first, each from that attempt's record.

A result read back is a :class:`CaravelTaskResult`: Django's ``TaskResult`` with what the
task reported while it ran (:func:`caravel.contrib.django.current_job`), ``progress`` and
``meta``, which ``refresh()`` reads again with the rest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any
from uuid import UUID

from caravel.attempts import AttemptOutcome, AttemptRecord
from caravel.clock import from_ms
from caravel.contrib.django.compat import TaskError, TaskResult, TaskResultStatus
from caravel.jobs import FailureCategory, JobState, JobStatus
from caravel.progress import JobProgress
from caravel.validation import check_queue_name

__all__ = [
    "UNRECORDED_WORKER",
    "CaravelTaskResult",
    "error_line",
    "exception_path",
    "finish",
    "parse_result_id",
    "result_id",
    "running_result",
    "stored_errors",
    "stored_result",
]

#: What ``worker_ids`` holds for each attempt.
UNRECORDED_WORKER = "unrecorded"

_STATUS = {
    JobState.READY: "READY",
    JobState.RUNNING: "RUNNING",
    JobState.COMPLETED: "SUCCESSFUL",
    JobState.DEAD_LETTER: "FAILED",
    JobState.CANCELLED: "FAILED",
}

#: The exception class behind a failure that no handler raised.
_CATEGORY_CLASS: dict[str, str] = {
    FailureCategory.UNKNOWN_JOB_TYPE: "caravel.errors.UnknownJobTypeError",
    FailureCategory.INVALID_PAYLOAD: "caravel.errors.ValidationError",
    FailureCategory.LEASE_EXPIRED: "caravel.errors.LeaseLostError",
    FailureCategory.TIMED_OUT: "builtins.TimeoutError",
}

#: How an attempt ends when it is one of a result's errors. (A snooze is no failure, and a
#: cancel is an operator's act, not something the task raised.)
_FAILED = frozenset(
    {
        AttemptOutcome.FAILED,
        AttemptOutcome.TIMED_OUT,
        AttemptOutcome.DISCARDED,
        AttemptOutcome.LEASE_EXPIRED,
    }
)


@dataclass(frozen=True, slots=True, kw_only=True)
class CaravelTaskResult(TaskResult):
    """Django's ``TaskResult`` of a Caravel job, with what its task reported while it ran:
    ``progress`` (a :class:`~caravel.JobProgress`, ``None`` when it never reported) and
    ``meta`` (the keys it set), both kept after it finishes. ``refresh()`` reads them again
    with the rest of the result."""

    progress: JobProgress | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    def refresh(self) -> None:
        self._take(self.task.get_backend().get_result(self.id))

    async def arefresh(self) -> None:
        self._take(await self.task.get_backend().aget_result(self.id))

    def _take(self, fresh: Any) -> None:
        """What Django's ``refresh`` reads again (every field but the task's identity and
        arguments), ``progress`` and ``meta`` included, from one read of the result."""
        for found in fields(fresh):
            if found.name not in _IDENTITY:
                object.__setattr__(self, found.name, getattr(fresh, found.name))


#: The fields of a result that a refresh keeps as they are.
_IDENTITY = frozenset({"task", "id", "args", "kwargs", "backend"})


def result_id(queue: str, job_id: UUID) -> str:
    return f"{queue}:{job_id}"


def parse_result_id(text: object) -> tuple[str, UUID] | None:
    """The queue and job id of a result id, or ``None`` when it is not one."""
    if not isinstance(text, str):
        return None
    queue, sep, job = text.partition(":")
    if not sep:
        return None
    try:
        check_queue_name(queue)
        return queue, UUID(job)
    except ValueError:  # ValidationError is a ValueError, and so is a bad UUID
        return None


def enqueued_at(job_id: UUID) -> datetime:
    """When the job was enqueued: its version-7 id starts with that millisecond."""
    return from_ms(job_id.int >> 80)


def exception_path(exc: BaseException) -> str:
    kind = type(exc)
    return f"{kind.__module__}.{kind.__qualname__}"


def error_line(path: str, detail: str | None) -> str:
    """A ``TaskError``'s ``traceback``: ``path: detail`` (as a traceback ends) when a detail
    was marked safe, else empty."""
    return "" if detail is None else f"{path}: {detail}"


def _result(task: Any, alias: str, job_id: UUID, queue: str, call: Any, **fields: Any) -> Any:
    return CaravelTaskResult(
        task=task,
        id=result_id(queue, job_id),
        args=list(call.args),
        kwargs=dict(call.kwargs),
        backend=alias,
        **fields,
    )


def running_result(
    task: Any, alias: str, job_id: UUID, queue: str, attempt: int, call: Any, now: datetime
) -> Any:
    """The result of an attempt that is starting now (what the task context carries)."""
    return _result(
        task,
        alias,
        job_id,
        queue,
        call,
        status=TaskResultStatus.RUNNING,
        enqueued_at=enqueued_at(job_id),
        started_at=now,
        finished_at=None,
        last_attempted_at=now,
        errors=[],
        worker_ids=[UNRECORDED_WORKER] * attempt,
    )


def finish(
    result: Any,
    now: datetime,
    *,
    value: Any = None,
    error: str | None = None,
    detail: str | None = None,
) -> None:
    """Mark ``result`` finished: successful with ``value``, or failed with ``error``'s class
    path and the failure's safe ``detail``, if any. (``TaskResult`` is frozen; Django's own
    backends update it the same way.)"""
    object.__setattr__(result, "finished_at", now)
    if error is None:
        object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
        object.__setattr__(result, "_return_value", value)
    else:
        object.__setattr__(result, "status", TaskResultStatus.FAILED)
        line = error_line(error, detail)
        result.errors.append(TaskError(exception_class_path=error, traceback=line))


def _error_path(error_class: str | None, category: str | None) -> str | None:
    """The class path of a failure: the exception the task raised, else the one that stands
    for its category; ``None`` when nothing failed."""
    path = error_class or _CATEGORY_CLASS.get(category or "")
    if path is None and category is not None:
        return "caravel.errors.CaravelError"
    return path


def stored_errors(status: JobStatus, attempts: Sequence[AttemptRecord]) -> list[Any]:
    """A stored job's ``TaskError`` list: one per failed attempt the history keeps, oldest
    first, its traceback the safe detail the attempt's record holds (:func:`error_line`).

    A job whose history keeps no failed attempt while its status names a failure (the
    records were dropped to bound its history, or written before there was a history) has
    that last failure alone, with an empty traceback."""
    errors = []
    for record in attempts:
        if record.outcome in _FAILED:
            found = _error_path(record.error_class, record.category)
            path = found or "caravel.errors.CaravelError"
            errors.append(
                TaskError(exception_class_path=path, traceback=error_line(path, record.detail))
            )
    if not errors:
        last = _error_path(status.error_class, status.last_failure)
        if last is not None:
            errors.append(TaskError(exception_class_path=last, traceback=""))
    return errors


def stored_result(
    task: Any, alias: str, status: JobStatus, call: Any, attempts: Sequence[AttemptRecord] = ()
) -> Any | None:
    """The result of a stored job (its errors from ``attempts``, its attempt history), or
    ``None`` for a pruned one (its state is gone)."""
    name = _STATUS.get(status.state)
    if name is None:
        return None
    errors = stored_errors(status, attempts)
    finished = status.state is not JobState.READY and status.state is not JobState.RUNNING
    result = _result(
        task,
        alias,
        status.job_id,
        status.queue,
        call,
        status=getattr(TaskResultStatus, name),
        enqueued_at=status.created_at,
        started_at=status.started_at,
        finished_at=status.finished_at if finished else None,
        last_attempted_at=status.started_at,
        errors=errors,
        worker_ids=[UNRECORDED_WORKER] * status.attempt,
        progress=status.progress,
        meta=status.meta,
    )
    if status.state is JobState.COMPLETED:
        object.__setattr__(result, "_return_value", status.result)
    return result
