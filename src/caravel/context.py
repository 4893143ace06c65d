"""What a handler knows about the job it is running."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Generic, TypeVar
from uuid import UUID

__all__ = ["JobCancelledError", "JobContext"]

ScopeT = TypeVar("ScopeT")


class JobCancelledError(Exception):
    """Raised by :meth:`JobContext.raise_if_cancelled` inside a synchronous handler whose job was
    cancelled (lease lost or expired, lease lifetime reached, or worker shutdown). The worker does
    not acknowledge a cancelled job."""


@dataclass(kw_only=True, slots=True, eq=False)
class JobContext(Generic[ScopeT]):
    """The stored identity of the job being run, and its cancellation signal.

    Use ``tenant_id`` (the tenant stored with the job) to scope the handler's data access; a
    tenant field inside the payload is not trustworthy. ``job_id`` is stable across every retry
    and makes a good key for repeat-safe effects. ``scope`` is the value of the per-job scope the
    application supplied to the worker (``None`` without one).

    Async handlers are cancelled like any asyncio task. Synchronous handlers run in a thread and
    should check :attr:`cancelled` (or call :meth:`raise_if_cancelled`) between steps.
    """

    job_id: UUID
    queue: str
    tenant_id: str
    job_type: str
    attempt: int
    max_attempts: int
    scope: ScopeT
    cancelled: threading.Event = field(default_factory=threading.Event)

    @property
    def is_cancelled(self) -> bool:
        return self.cancelled.is_set()

    def raise_if_cancelled(self) -> None:
        """Raise :class:`JobCancelledError` if the job has been cancelled."""
        if self.cancelled.is_set():
            raise JobCancelledError(f"job {self.job_id} was cancelled")
