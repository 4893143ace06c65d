"""The worker service: composition only.

``run_once`` takes one step and is what tests and custom schedulers drive. ``run`` is the
continuous service built from the same pieces: one fetcher per queue claims as many jobs as there
are free handler slots, each job runs in its own task under its lease, and the acknowledger writes
outcomes in batches. Both run a job the same way and record its outcome through the same
acknowledger.

Stopping: :meth:`QueueWorker.stop` (the command line calls it on SIGTERM or SIGINT) stops
claiming, lets in-flight handlers finish and be acknowledged for ``shutdown_grace``, then cancels
the rest without acknowledging them; their jobs run again once their leases expire. A second stop
request cancels at once. A handler that raises ``KeyboardInterrupt`` is a stop request too (its
own job is abandoned, like those cancelled at the stop); one that raises ``SystemExit`` only
failed its attempt. A database failure while claiming, acknowledging or renewing stops the
worker too, and ``run`` raises it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

from caravel._closing import AsyncClosing
from caravel._failpoints import failpoint
from caravel.errors import ValidationError
from caravel.flow.following import LimitedQueues
from caravel.jobs import ClaimedJob, Lease
from caravel.options import WorkerOptions
from caravel.queue import DatabaseQueue
from caravel.validation import check_queue_name
from caravel.worker.acknowledger import Acknowledger
from caravel.worker.cancels import CancelWatch
from caravel.worker.fetcher import Fetcher, Slots
from caravel.worker.leases import Leases
from caravel.worker.pausing import PausedQueues
from caravel.worker.presence import Presence, QueueGaugeCollector
from caravel.worker.pruner import Pruner
from caravel.worker.reporting import OutcomeReport, log_job, logger
from caravel.worker.runner import Abandoned, JobRunner, Outcome, ScopeFactory
from caravel.worker.scheduler import Scheduler
from caravel.worker.summary import JobSummary
from caravel.worker.threads import HandlerThreads
from caravel.worker.wakeups import WakeupListener
from caravel.worker.watchdog import LeaseWatchdog

__all__ = ["AbandonedJob", "QueueWorker", "Step", "Stopping"]


@dataclass(frozen=True, slots=True)
class Stopping:
    """What a stop request waits for: ``jobs`` handlers running, given ``grace`` to finish;
    ``cancelling`` when they are being cancelled now instead (a second request, no grace)."""

    jobs: int
    grace: timedelta
    cancelling: bool


@dataclass(frozen=True, slots=True)
class Step:
    """One job :meth:`QueueWorker.step` ran: the claim, its outcome (``None`` when the attempt
    was abandoned without an acknowledgement, ``abandoned`` saying why) and whether the outcome
    was recorded (``held``: false when a newer lease fenced it off)."""

    claimed: ClaimedJob
    outcome: Outcome | None
    held: bool
    abandoned: Abandoned | None = None


@dataclass(frozen=True, slots=True)
class AbandonedJob:
    """A job the last stop cancelled without an acknowledgement: it runs again, on any worker,
    once its lease ends at ``lease_expires_at``."""

    job_id: UUID
    queue: str
    lease_expires_at: datetime


class QueueWorker(AsyncClosing):
    """Runs handlers for jobs claimed from a :class:`~caravel.queue.DatabaseQueue`.

    ``scope`` is an optional factory of async context managers; the worker opens a fresh one
    around each job, and the handler reaches its value as ``ctx.scope`` (a database session, a
    unit of work, ...). Synchronous handlers run in a thread pool with one thread per concurrent
    handler.
    """

    def __init__(
        self,
        queue: DatabaseQueue,
        *,
        options: WorkerOptions | None = None,
        scope: ScopeFactory | None = None,
    ) -> None:
        if not isinstance(queue, DatabaseQueue):
            raise ValidationError("queue", "must be a DatabaseQueue")
        self.queue = queue
        self.options = options if options is not None else WorkerOptions()
        #: This process's id in the worker registry (``caravel workers``).
        self.worker_id = uuid4()
        self._threads = HandlerThreads(self.options.concurrency)
        self.leases = Leases(queue, durable_acks=self.options.durable_acks)
        self._watchdog = LeaseWatchdog(self.leases, timeout_grace=self.options.timeout_grace)
        self._runner = JobRunner(
            queue.registry,
            queue.clock,
            self._watchdog,
            scope=scope,
            threads=self._threads,
            tracebacks=self.options.log_tracebacks,
            max_result_bytes=queue.options.max_result_bytes,
            redactor=self.options.redactor,
        )
        self._summary = JobSummary(queue.clock, self.options.summary_interval)
        self._report = OutcomeReport(self._summary)
        self._acker = Acknowledger(self.leases, on_written=self._written, on_error=self._failed)
        self._slots = Slots(self.options.concurrency, self._job)
        self._presence = Presence(
            queue.store,
            queue.clock,
            worker_id=self.worker_id,
            concurrency=self.options.concurrency,
            heartbeat_interval=self.options.heartbeat_interval,
            in_flight=lambda: len(self._slots.tasks),
        )
        self._limits = LimitedQueues(queue.store)
        self._paused = PausedQueues(
            queue.store,
            queue.clock,
            queue.wakeups,
            poll_seconds=self.options.poll_interval.total_seconds(),
            limits=self._limits,
        )
        self._stop_requested = asyncio.Event()
        self._cancel_now = asyncio.Event()
        self._fault: BaseException | None = None
        self._run_ended = False
        self._leases_at_stop: dict[UUID, Lease] = {}
        #: Jobs the last :meth:`run` cancelled at its stop, with when they run again.
        self.abandoned_at_stop: list[AbandonedJob] = []
        #: Synchronous handlers running when the last stop began, and those still running when
        #: :meth:`run` returned (abandoned: nothing waits for them, the process may exit).
        self.threads_at_stop = 0
        self.threads_abandoned = 0

    async def close(self) -> None:
        """Release the handler threads (abandoned synchronous handlers are not waited for)."""
        await self._acker.close()
        await self._watchdog.close()
        self._threads.shutdown(wait=False, cancel_futures=True)

    @property
    def in_flight(self) -> int:
        """Handlers running right now."""
        return len(self._slots.tasks)

    @property
    def paused(self) -> frozenset[str]:
        """The queues of :meth:`run` this worker found paused when it last read (see
        :meth:`DatabaseQueue.pause_queue <caravel.DatabaseQueue.pause_queue>`)."""
        return self._paused.paused

    @property
    def lost_acknowledgements(self) -> int:
        """Outcomes a newer lease fenced off since the worker was built."""
        return self._report.lost_acknowledgements

    # ----- one step ------------------------------------------------------------------------

    async def run_once(self, queue: str) -> bool:
        """Claim at most one job of ``queue``, run it and record its outcome.

        Returns whether a job was claimed, not whether its handler succeeded. Database failures
        while claiming or acknowledging propagate; they are never recorded as job failures.
        """
        return await self.step(queue) is not None

    async def step(self, queue: str) -> Step | None:
        """:meth:`run_once`, saying what it ran: the claimed job and its outcome (``None`` when
        nothing was due, or ``queue`` is paused: read afresh on every call).
        ``caravel.testing.drain`` reports runs through this."""
        check_queue_name(queue)
        if await self._paused.paused_now(queue):
            return None
        claimed = await self.leases.claim(queue, limited=await self._limits.limited_now(queue))
        if claimed is None:
            return None
        failpoint("after_claim")
        outcome = await self._execute(claimed)
        if outcome.abandoned is not None:
            return Step(claimed, None, False, outcome.abandoned)
        held = claimed.job_id in await self._acker.write([(claimed, outcome)])
        return Step(claimed, outcome, held)

    async def _execute(self, claimed: ClaimedJob) -> Outcome:
        """Run one claimed job to its outcome; an abandoned one is reported here."""
        outcome = await self._runner.run(claimed)
        failpoint("after_handler_before_ack")
        if outcome.abandoned is not None:
            self._report.abandoned(claimed, outcome)
        return outcome

    # ----- continuous ----------------------------------------------------------------------

    def stop(self, *, immediate: bool = False) -> Stopping:
        """Ask :meth:`run` to stop, and say what it waits for. The first request drains
        gracefully; a second one (or ``immediate=True``) cancels in-flight handlers at once."""
        grace = self.options.shutdown_grace
        if self._stop_requested.is_set() or immediate or not grace:
            self._cancel_now.set()
        self._stop_requested.set()
        cancelling = self._cancel_now.is_set()
        return Stopping(self.in_flight, timedelta(0) if cancelling else grace, cancelling)

    async def run(self, queues: str | Sequence[str]) -> None:
        """Process ``queues`` until :meth:`stop` is called or the database fails.

        Checks first that the schema is migrated (raising
        :class:`~caravel.errors.SchemaNotReadyError` otherwise). Returns normally after a stop;
        raises the error that stopped it otherwise. It may be called again afterwards (a
        supervisor restarting the loop after a database outage), once the previous call has
        returned.
        """
        names = [queues] if isinstance(queues, str) else list(queues)
        if not names:
            raise ValidationError("queues", "must name at least one queue")
        for name in names:
            check_queue_name(name, "queues")
        if self._run_ended:
            # A fresh start after an earlier run: forget its stop request and its fault. (A stop
            # requested before the first run still counts.)
            self._stop_requested = asyncio.Event()
            self._cancel_now = asyncio.Event()
            self._fault = None
            self._run_ended = False
        self.abandoned_at_stop = []
        self.threads_at_stop = self.threads_abandoned = 0
        await self.queue.check_schema()
        await self._declare_limits()
        await self._presence.register(names)
        self._summary.reset()
        await self._paused.refresh(names)  # before the first claim
        services = [self._service(f.run(), f"fetch-{f.queue}") for f in self._fetchers(names)]
        services.append(self._service(self._paused.run(), "paused"))
        services.append(self._side_service(self._presence.run(), "heartbeat"))
        services.append(self._side_service(self._summary.run(), "summary"))
        interval = self.options.queue_metrics_interval
        if interval is not None:
            gauges = QueueGaugeCollector(self.queue.store, self.queue.clock, interval)
            services.append(self._side_service(gauges.run(), "gauges"))
        services.extend(self._cancel_services())
        retention = self.options.retention
        if retention is not None and retention.enabled:
            pruner = Pruner(
                self.queue.store, self.queue.clock, retention, self.options.prune_interval
            )
            services.append(self._side_service(pruner.run(), "prune"))
        schedules = self.queue.registry.schedules
        if schedules and self.options.schedules:
            scheduler = Scheduler(self.queue, schedules)
            services.append(self._side_service(scheduler.run(), "schedules"))
        listener = WakeupListener.for_store(self.queue.store, names, self.queue.wakeups)
        if listener is not None:
            services.append(self._side_service(listener.run(), "listen"))
        for name in names:
            self.queue.wakeups.event(name)
        try:
            await self._stop_requested.wait()
        finally:
            for task in services:
                task.cancel()
            await asyncio.gather(*services, return_exceptions=True)
            await self._drain()
            self._summary.run_once()  # what finished since the last summary, stopping included
            if self._fault is None:  # else the database is likely unusable: it shows as lost
                await self._presence.deregister()
            self._run_ended = True
        if self._fault is not None:
            raise self._fault

    def _written(self, claimed: ClaimedJob, outcome: Outcome, held: bool) -> None:
        """An outcome reached the database: reported, and for a limited queue its slot is
        free, so the queue's fetcher is woken to claim again."""
        self._report.written(claimed, outcome, held)
        if claimed.queue in self._limits:
            self.queue.wakeups.notify({claimed.queue})

    async def _declare_limits(self) -> None:
        """Store the concurrency limits the registry declares (:meth:`JobRegistry.limit
        <caravel.JobRegistry.limit>`), replacing what the database held for their queues."""
        now = self.queue.clock.now_ms()
        for limit in self.queue.registry.limits:
            await self.queue.store.queue_limit_set(limit, now)

    def _cancel_services(self) -> list[asyncio.Task[None]]:
        """The loops that cancel handlers of jobs an operator cancelled: polling, and following
        the store's pushed notices where it has them."""
        watch = CancelWatch(
            self.queue.store, self._watchdog, self.queue.clock, self.options.poll_interval
        )
        services = [self._side_service(watch.run(), "cancel-poll")]
        notices = watch.notices()
        if notices is not None:
            services.append(self._side_service(watch.listen(notices), "cancel-listen"))
        return services

    def _fetchers(self, names: Sequence[str]) -> list[Fetcher]:
        return [
            Fetcher(
                name,
                self.leases,
                self._slots,
                wakeups=self.queue.wakeups,
                options=self.options,
                clock=self.queue.clock,
                push=self.queue.store.supports_listen_notify,
                stopping=self._stop_requested,
                paused=self._paused,
                limits=self._limits,
            )
            for name in names
        ]

    def _service(self, loop: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """Run one of the worker's loops; an error in it stops the worker."""

        async def guarded() -> None:
            try:
                await loop
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._failed(exc)

        return asyncio.create_task(guarded(), name=f"caravel-{name}")

    def _side_service(self, loop: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """Run a loop the worker can do without (heartbeat, gauges, the wake-up listener): an
        error it does not handle itself ends that loop, logged, and the worker carries on
        (claims poll without wake-ups; the registry shows the worker as lost)."""

        async def guarded() -> None:
            try:
                await loop
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.error(
                    "worker %s loop stopped: %s",
                    name,
                    type(exc).__name__,
                    extra={"error_type": type(exc).__name__},
                )

        return asyncio.create_task(guarded(), name=f"caravel-{name}")

    def _interrupted(self, claimed: ClaimedJob, lease: Lease) -> None:
        """A handler raised ``KeyboardInterrupt``: the worker stops as on SIGINT, the job
        among those it abandoned."""
        self.abandoned_at_stop.append(AbandonedJob(claimed.job_id, claimed.queue, lease.expires_at))
        if not self._stop_requested.is_set():
            logger.warning(
                "worker stopping: a job handler raised KeyboardInterrupt",
                extra={"job_id": str(claimed.job_id), "queue": claimed.queue},
            )
            self.stop()

    def _failed(self, exc: BaseException) -> None:
        if self._fault is None:
            self._fault = exc
            logger.error(
                "worker stopping: %s",
                type(exc).__name__,
                extra={
                    "error_type": type(exc).__name__,
                    "operation": getattr(exc, "operation", None),
                },
            )
        self._cancel_now.set()
        self._stop_requested.set()

    async def _drain(self) -> None:
        running = self._slots.tasks
        self.threads_at_stop = self._threads.busy
        if running and not self._cancel_now.is_set():
            grace = self.options.shutdown_grace.total_seconds()
            pending: asyncio.Future[Any] = asyncio.gather(*running, return_exceptions=True)
            cancelled: asyncio.Future[Any] = asyncio.ensure_future(self._cancel_now.wait())
            try:
                await asyncio.wait(
                    {pending, cancelled}, timeout=grace, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                cancelled.cancel()
        # The leases as last renewed: when the jobs cancelled now become claimable again.
        self._leases_at_stop = self._watchdog.current_leases()
        for task in list(running):
            task.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)
        # A cancelled synchronous handler's thread runs on until it returns; nothing waits.
        self.threads_abandoned = self._threads.busy
        if self._fault is None:
            await self._acker.close()
        else:
            await self._acker.abort()

    async def _job(self, claimed: ClaimedJob) -> None:
        try:
            outcome = await self._execute(claimed)
            if outcome.abandoned is Abandoned.INTERRUPTED:
                self._interrupted(claimed, outcome.lease)
            if outcome.abandoned is not None:
                return
            if not self._acker.has_room():
                await self._acker.room()
            # The slot frees now; the acknowledger writes the outcome with the next batch.
            self._acker.post(claimed, outcome)
        except asyncio.CancelledError:
            lease = self._leases_at_stop.get(claimed.job_id, claimed.lease)
            self.abandoned_at_stop.append(
                AbandonedJob(claimed.job_id, claimed.queue, lease.expires_at)
            )
            log_job(
                logging.WARNING, "job abandoned without acknowledgement", claimed, reason="shutdown"
            )
        except Exception as exc:
            self._failed(exc)
