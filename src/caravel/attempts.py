"""A job's attempt history as the public API returns it: how each attempt ended
(:class:`AttemptOutcome`) and its record (:class:`AttemptRecord`), read with
:meth:`DatabaseQueue.get_attempts <caravel.DatabaseQueue.get_attempts>`."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

__all__ = ["AttemptOutcome", "AttemptRecord"]


class AttemptOutcome(enum.StrEnum):
    """How one attempt of a job ended, as its record keeps it. Stored as these exact strings."""

    COMPLETED = "completed"
    """The handler succeeded and its worker recorded it."""
    FAILED = "failed"
    """The handler failed (``category`` and ``error_class`` say how): the job retries at
    ``retry_at``, or, without one, it used its last attempt and is a dead letter."""
    SNOOZED = "snoozed"
    """The handler snoozed: the job runs again at ``retry_at``, and the attempt number is given
    back, so the next record has the same one."""
    CANCELLED = "cancelled"
    """An operator cancelled the job while this attempt ran."""
    TIMED_OUT = "timed_out"
    """The attempt ran past its execution timeout (category ``TimedOut``); retried as a
    failure is."""
    LEASE_EXPIRED = "lease_expired"
    """No outcome was recorded before the lease ended (the worker crashed, stalled or lost
    the database): written when another claim took the job over, or dead-lettered it with no
    attempts left. ``finished_at`` is when the lease ended."""
    DISCARDED = "discarded"
    """The handler raised :class:`~caravel.Discard`: a dead letter at once."""
    ABANDONED = "abandoned"
    """Its worker gave the job back unfinished. Reserved: no worker records it yet (an attempt
    a stopping worker leaves unacknowledged ends as ``lease_expired`` once taken over)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class AttemptRecord:
    """One attempt of a job, as its history keeps it (see
    :meth:`DatabaseQueue.get_attempts <caravel.DatabaseQueue.get_attempts>`): which worker ran
    it (its registry id, host and process), from when to when, and how it ended. It never holds
    a payload or an exception's message: ``detail`` is only what a handler marked safe to keep.
    """

    attempt: int
    """The attempt number the claim gave (a snooze gives it back, so two records can share it)."""
    lease_token: int
    """The claim's fencing token: every claim of the job has its own, and it only grows."""
    outcome: AttemptOutcome
    worker_id: UUID | None
    """The worker that ran the attempt (``caravel workers``), when it was one that registered."""
    host: str | None
    pid: int | None
    claimed_at: datetime | None
    finished_at: datetime | None
    """When the outcome was recorded; for ``lease_expired``, when the lease ended."""
    category: str | None = None
    """The failure category (``HandlerFailed``, ``TimedOut``, ``LeaseExpired``...), if any."""
    error_class: str | None = None
    """The class of the exception the handler raised (``module.QualName``), if any."""
    detail: str | None = None
    """What the handler marked safe for operators about this attempt, if anything."""
    retry_at: datetime | None = None
    """When the job runs again after a failure or a snooze; ``None`` after a last attempt."""

    @property
    def duration(self) -> timedelta | None:
        """From the claim to the outcome (or to the lease's end), when both are known."""
        if self.claimed_at is None or self.finished_at is None:
            return None
        return self.finished_at - self.claimed_at
