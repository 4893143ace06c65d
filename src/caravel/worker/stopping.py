"""How a worker's run stops: stop requests, the fault that stops it, and what the stop leaves
behind.

:meth:`QueueWorker.stop <caravel.QueueWorker.stop>` (the command line calls it on SIGTERM or
SIGINT) stops claiming, lets in-flight handlers finish and be acknowledged for
``shutdown_grace``, then cancels the rest without acknowledging them; their jobs run again once
their leases expire (:class:`AbandonedJob`). A second stop request cancels at once. A handler
that raises ``KeyboardInterrupt`` is a stop request too (its own job is abandoned, like those
cancelled at the stop); one that raises ``SystemExit`` only failed its attempt. A database
failure while claiming, acknowledging or renewing stops the worker too (the fault), and ``run``
raises it: at once, or, when the database is only unreachable, once the worker's outage window
is used up (:mod:`~caravel.worker.outage`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from caravel.jobs import ClaimedJob, Lease
from caravel.worker.acknowledger import Acknowledger
from caravel.worker.ending import cancel_and_wait
from caravel.worker.reporting import log_job, logger
from caravel.worker.threads import HandlerThreads
from caravel.worker.watchdog import LeaseWatchdog

__all__ = ["AbandonedJob", "Shutdown", "Stopping"]

#: How long a cancelled handler may go on before it is cancelled again.
HANDLER_AGAIN_AFTER = 2.0


@dataclass(frozen=True, slots=True)
class Stopping:
    """What a stop request waits for: ``jobs`` handlers running, given ``grace`` to finish;
    ``cancelling`` when they are being cancelled now instead (a second request, no grace)."""

    jobs: int
    grace: timedelta
    cancelling: bool


@dataclass(frozen=True, slots=True)
class AbandonedJob:
    """A job the last stop cancelled without an acknowledgement: it runs again, on any worker,
    once its lease ends at ``lease_expires_at``."""

    job_id: UUID
    queue: str
    lease_expires_at: datetime


class Shutdown:
    """The stop of a worker's runs: the signals a run stops on, the fault that stopped it, and the
    jobs and handler threads its stop abandoned."""

    def __init__(self, grace: timedelta) -> None:
        self._grace = grace
        #: Set by the first stop request or a fault: the run stops claiming and drains.
        self.requested = asyncio.Event()
        #: Set when in-flight handlers are cancelled at once rather than given the grace.
        self.cancel_now = asyncio.Event()
        #: The error that stopped the run, which the run raises.
        self.fault: BaseException | None = None
        self._ended = False
        self._leases_at_stop: dict[UUID, Lease] = {}
        #: Jobs the last run cancelled at its stop, with when they run again.
        self.abandoned: list[AbandonedJob] = []
        #: Synchronous handlers running when the last stop began, and those still running when
        #: the run returned (abandoned: nothing waits for them, the process may exit).
        self.threads_at_stop = 0
        self.threads_abandoned = 0

    def begin(self) -> None:
        """A run starts: what the previous run's stop left behind is forgotten."""
        if self._ended:
            # A fresh start after an earlier run: forget its stop request and its fault. (A stop
            # requested before the first run still counts.)
            self.requested = asyncio.Event()
            self.cancel_now = asyncio.Event()
            self.fault = None
            self._ended = False
        self.abandoned = []
        self.threads_at_stop = self.threads_abandoned = 0

    def end(self) -> None:
        """The run has stopped; the next one starts afresh."""
        self._ended = True

    def request(self, *, immediate: bool = False) -> bool:
        """Ask the run to stop; whether in-flight handlers are cancelled at once (a second
        request, ``immediate``, or no grace) rather than drained."""
        if self.requested.is_set() or immediate or not self._grace:
            self.cancel_now.set()
        self.requested.set()
        return self.cancel_now.is_set()

    def fail(self, exc: BaseException) -> None:
        """A loop or the acknowledger failed: the run stops at once and raises ``exc``."""
        if self.fault is None:
            self.fault = exc
            logger.error(
                "worker stopping: %s",
                type(exc).__name__,
                extra={
                    "error_type": type(exc).__name__,
                    "operation": getattr(exc, "operation", None),
                },
            )
        self.cancel_now.set()
        self.requested.set()

    def interrupted(self, claimed: ClaimedJob, lease: Lease) -> None:
        """A handler raised ``KeyboardInterrupt``: the worker stops as on SIGINT, the job
        among those it abandoned."""
        self.abandoned.append(AbandonedJob(claimed.job_id, claimed.queue, lease.expires_at))
        if not self.requested.is_set():
            logger.warning(
                "worker stopping: a job handler raised KeyboardInterrupt",
                extra={"job_id": str(claimed.job_id), "queue": claimed.queue},
            )
            self.request()

    def cancelled(self, claimed: ClaimedJob) -> None:
        """The stop cancelled ``claimed``'s handler: its job waits for its lease as last renewed
        to end."""
        lease = self._leases_at_stop.get(claimed.job_id, claimed.lease)
        self.abandoned.append(AbandonedJob(claimed.job_id, claimed.queue, lease.expires_at))
        log_job(
            logging.WARNING, "job abandoned without acknowledgement", claimed, reason="shutdown"
        )

    async def drain(
        self,
        running: set[asyncio.Task[None]],
        threads: HandlerThreads,
        watchdog: LeaseWatchdog,
        acker: Acknowledger,
    ) -> None:
        """Give the ``running`` handlers the grace (unless they are cancelled now), cancel those
        left, and let the acknowledger write what finished (or drop it, after a fault)."""
        self.threads_at_stop = threads.busy
        if running and not self.cancel_now.is_set():
            grace = self._grace.total_seconds()
            pending: asyncio.Future[Any] = asyncio.gather(*running, return_exceptions=True)
            cancelled: asyncio.Future[Any] = asyncio.ensure_future(self.cancel_now.wait())
            try:
                await asyncio.wait(
                    {pending, cancelled}, timeout=grace, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                cancelled.cancel()
        # The leases as last renewed: when the jobs cancelled now become claimable again.
        self._leases_at_stop = watchdog.current_leases()
        # Cancelled again while they go on: a handler's driver may swallow the first cancel.
        # A handler's own tidying after its cancel (a rollback, a close) gets a few seconds
        # before the second one, more than the worker's own loops get.
        await cancel_and_wait(list(running), again_after=HANDLER_AGAIN_AFTER)
        # A cancelled synchronous handler's thread runs on until it returns; nothing waits.
        self.threads_abandoned = threads.busy
        if self.fault is None:
            await acker.close()
        else:
            await acker.abort()
