"""What a worker's alert hooks receive (:attr:`WorkerOptions.on_dead_letter
<caravel.WorkerOptions.on_dead_letter>`, :attr:`WorkerOptions.on_stuck
<caravel.WorkerOptions.on_stuck>`): small frozen values naming the job and how its attempt went.

Like an attempt record they never hold the job's payload or an exception's message, which may
quote job data: a failure is its category, its exception's class and the detail a handler or
the redactor marked safe, if any. The tenant is there so an application can route its alert; it
is the application's own value, never put in telemetry.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from uuid import UUID

from caravel.attempts import AttemptOutcome

__all__ = ["DeadLetterEvent", "DeadLetterHook", "StuckEvent", "StuckHook"]


@dataclass(frozen=True, kw_only=True, slots=True)
class DeadLetterEvent:
    """A job this worker moved to dead letter: its last attempt failed, timed out or was
    discarded, and the write that recorded it was committed under the attempt's lease."""

    job_id: UUID
    queue: str
    job_type: str
    tenant_id: str
    attempt: int
    """The attempt that dead-lettered the job (1 for the first)."""
    outcome: AttemptOutcome
    """``failed``, ``timed_out`` or ``discarded``, as the attempt's record says."""
    category: str
    """The failure category (``HandlerFailed``, ``TimedOut``, a discard's own...)."""
    error_class: str | None = None
    """The class of the exception the handler raised (``module.QualName``), if any."""
    detail: str | None = None
    """What the handler (or the worker's redactor) marked safe to keep, cleaned; else ``None``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StuckEvent:
    """A handler still running ``timeout_grace`` after its execution timeout asked it to stop.
    Its lease is renewed no more: when the lease ends, the attempt is recorded as timed out."""

    job_id: UUID
    queue: str
    job_type: str
    tenant_id: str
    attempt: int
    timeout: timedelta
    """The attempt's execution timeout."""
    overdue: timedelta
    """How long past the timeout the handler was still running when reported."""


#: A hook for dead letters: a function, or an async function, taking the event.
DeadLetterHook = Callable[[DeadLetterEvent], "Awaitable[object] | object"]
#: A hook for stuck handlers: a function, or an async function, taking the event.
StuckHook = Callable[[StuckEvent], "Awaitable[object] | object"]
