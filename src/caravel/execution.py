"""Running one claimed job: decode it, open its scope, run its handler under its lease, and decide
the outcome. Persisting the outcome is the caller's job (see :mod:`caravel.worker`).

The handler is cancelled, and its outcome is not acknowledged, when:

* the lease runs out without renewal (or renewal is off);
* a renewal is rejected (another worker took over, or the job finished);
* the maximum lease lifetime is reached;
* the worker shuts down.

A renewal that fails because the database failed cancels the handler and raises the
:class:`~caravel.errors.StoreError` to the worker, which stops.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from caravel.clock import duration_ms
from caravel.codec import PayloadDecodeError, decode_payload
from caravel.context import JobContext
from caravel.jobs import ClaimedJob, FailureCategory, Lease
from caravel.queue import DatabaseQueue
from caravel.registry import JobType

__all__ = ["Abandoned", "Executor", "JobRunner", "Outcome", "ScopeFactory"]

logger = logging.getLogger("caravel.worker")

ScopeFactory = Callable[[], AbstractAsyncContextManager[Any]]


class Abandoned(enum.StrEnum):
    """Why a job's attempt ended without an acknowledgement."""

    LEASE_EXPIRED = "lease_expired"
    LEASE_LOST = "lease_lost"
    LIFETIME_REACHED = "lifetime_reached"
    SHUTDOWN = "shutdown"


@dataclass(frozen=True, slots=True)
class Outcome:
    """The decision for one attempt: success, a failure category, or abandoned (no ack).

    ``lease`` is the lease as last renewed; acknowledgements must present it.
    """

    lease: Lease
    failure: FailureCategory | None = None
    abandoned: Abandoned | None = None

    @property
    def succeeded(self) -> bool:
        return self.failure is None and self.abandoned is None


class _Cancelled(Exception):
    def __init__(self, reason: Abandoned) -> None:
        self.reason = reason


class JobRunner:
    """Runs claimed jobs for one queue facade; shared by ``run_once`` and the continuous
    worker."""

    def __init__(
        self,
        queue: DatabaseQueue,
        *,
        scope: ScopeFactory | None,
        threads: Executor,
    ) -> None:
        self._queue = queue
        self._scope = scope
        self._threads = threads
        renewal = queue.options.lease_renewal_interval
        self._renew_every_ms = None if renewal is None else duration_ms(renewal)

    async def run(self, claimed: ClaimedJob) -> Outcome:
        """Run one claimed job to an :class:`Outcome`. Raises only for infrastructure failures
        (a renewal the database could not answer) and for cancellation of the caller."""
        lease = claimed.lease
        entry = self._queue.registry.get(claimed.job_type)
        if entry is None:
            return Outcome(lease, failure=FailureCategory.UNKNOWN_JOB_TYPE)
        try:
            job = decode_payload(entry.adapter, claimed.payload)
        except PayloadDecodeError:
            return Outcome(lease, failure=FailureCategory.INVALID_PAYLOAD)
        scope = self._scope() if self._scope is not None else nullcontext(None)
        try:
            async with scope as scope_value:
                context: JobContext[Any] = JobContext(
                    job_id=claimed.job_id,
                    queue=claimed.queue,
                    tenant_id=claimed.tenant_id,
                    job_type=claimed.job_type,
                    attempt=lease.attempt,
                    max_attempts=lease.max_attempts,
                    scope=scope_value,
                )
                # A handler's exception propagates through the scope, so a scope that commits
                # on a clean exit (a session, a unit of work) rolls back a failed attempt.
                lease = await self._supervise(entry, job, context, lease)
        except _Cancelled as cancelled:
            return Outcome(lease, abandoned=cancelled.reason)
        except Exception as exc:  # the handler failed, or the scope failed to open or close
            logger.info(
                "job handler failed",
                extra={
                    "job_id": str(claimed.job_id),
                    "queue": claimed.queue,
                    "job_type": claimed.job_type,
                    "attempt": lease.attempt,
                    "error_type": type(exc).__name__,
                },
            )
            return Outcome(lease, failure=FailureCategory.HANDLER_FAILED)
        return Outcome(lease)

    async def _invoke(self, entry: JobType, job: object, context: JobContext[Any]) -> None:
        if entry.is_async:
            await entry.handler(job, context)  # type: ignore[misc]
            return
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._threads, entry.handler, job, context)

    async def _supervise(
        self, entry: JobType, job: object, context: JobContext[Any], lease: Lease
    ) -> Lease:
        """Run the handler under its lease. Returns the current lease when the handler returned;
        raises the handler's exception when it failed, :class:`_Cancelled` when the lease could
        not be held."""
        task = asyncio.ensure_future(self._invoke(entry, job, context))
        try:
            lease = await self._watch(task, lease)
        finally:
            if not task.done():
                context.cancelled.set()
                task.cancel()
                task.add_done_callback(_discard_result)
        task.result()
        return lease

    async def _watch(self, task: asyncio.Future[None], lease: Lease) -> Lease:
        """Wait for the handler while keeping its lease: renew on schedule, and raise
        :class:`_Cancelled` when the lease can no longer be held. Returns the current lease
        once the handler is done."""
        clock = self._queue.clock
        while not task.done():
            now = clock.now_ms()
            deadline = self._queue.lease_deadline_ms(lease)
            if now >= deadline:
                renewing = self._renew_every_ms is not None
                if renewing and now >= self._queue.lifetime_end_ms(lease):
                    raise _Cancelled(Abandoned.LIFETIME_REACHED)
                raise _Cancelled(Abandoned.LEASE_EXPIRED)
            wait_ms = deadline - now
            renew_at = None
            if self._renew_every_ms is not None:
                renew_at = now + self._renew_every_ms
                wait_ms = min(wait_ms, self._renew_every_ms)
            timer = asyncio.ensure_future(clock.sleep(wait_ms / 1000))
            try:
                await asyncio.wait({task, timer}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                timer.cancel()
            if task.done() or renew_at is None or clock.now_ms() < renew_at:
                continue
            if clock.now_ms() >= self._queue.lifetime_end_ms(lease):
                raise _Cancelled(Abandoned.LIFETIME_REACHED)
            renewed = await self._queue.renew(lease)  # a StoreError propagates to the worker
            if renewed is None:
                raise _Cancelled(Abandoned.LEASE_LOST)
            lease = renewed
        return lease


def _discard_result(task: asyncio.Future[None]) -> None:
    """Retrieve a cancelled handler's late result so asyncio does not report it as lost."""
    if not task.cancelled():
        task.exception()
