"""The worker service: composition only.

``run_once`` takes one step and is what tests and custom schedulers drive. ``run`` is the
continuous service built from the same pieces: one fetcher per queue claims as many jobs as there
are free handler slots, each job runs in its own task under its lease, and the acknowledger writes
outcomes in batches. Both run a job the same way and record its outcome through the same
acknowledger.

The service wires its pieces, each a module of its own: how a run stops (requests, the fault,
draining, the jobs left to their leases) is :mod:`~caravel.worker.stopping`'s, how its loops are
kept (which errors stop the worker) :mod:`~caravel.worker.supervisor`'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from uuid import uuid4

from caravel._closing import AsyncClosing
from caravel._failpoints import failpoint
from caravel.clock import duration_ms
from caravel.errors import ValidationError
from caravel.flow.following import LimitedQueues
from caravel.hooks import StuckEvent
from caravel.jobs import ClaimedJob
from caravel.options import WorkerOptions
from caravel.queue import DatabaseQueue
from caravel.validation import check_queue_name
from caravel.worker.acknowledger import Acknowledger
from caravel.worker.cancels import CancelWatch
from caravel.worker.fetcher import Fetcher, Slots
from caravel.worker.hooks import Hooks, dead_letter_event
from caravel.worker.leases import Leases
from caravel.worker.outage import Outage
from caravel.worker.outcome import Outcome
from caravel.worker.pausing import PausedQueues
from caravel.worker.presence import Presence, QueueGaugeCollector
from caravel.worker.progress import ProgressWriter
from caravel.worker.pruner import Pruner
from caravel.worker.reporting import OutcomeReport
from caravel.worker.runner import Abandoned, JobRunner, ScopeFactory
from caravel.worker.stopping import AbandonedJob, Shutdown, Stopping
from caravel.worker.summary import JobSummary
from caravel.worker.supervisor import Supervisor
from caravel.worker.threads import HandlerThreads
from caravel.worker.wakeups import WakeupListener
from caravel.worker.watchdog import LeaseWatchdog

__all__ = ["AbandonedJob", "QueueWorker", "Step", "Stopping"]


@dataclass(frozen=True, slots=True)
class Step:
    """One job :meth:`QueueWorker.step` ran: the claim, its outcome (``None`` when the attempt
    was abandoned without an acknowledgement, ``abandoned`` saying why) and whether the outcome
    was recorded (``held``: false when a newer lease fenced it off)."""

    claimed: ClaimedJob
    outcome: Outcome | None
    held: bool
    abandoned: Abandoned | None = None


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
        #: The window within which the database may be unreachable without stopping the run.
        self.outage = Outage(queue.clock, self.options.outage_window.total_seconds())
        self.leases = Leases(
            queue,
            durable_acks=self.options.durable_acks,
            worker_id=self.worker_id,
            attempt_history=self.options.attempt_history,
        )
        self._hooks = Hooks(queue.clock, duration_ms(self.options.hook_timeout))
        self._watchdog = LeaseWatchdog(
            self.leases,
            timeout_grace=self.options.timeout_grace,
            on_stuck=None if self.options.on_stuck is None else self._stuck,
            outage=self.outage,
        )
        self._progress = ProgressWriter(
            queue.store, queue.clock, self.options.progress_interval, outage=self.outage
        )
        self._runner = JobRunner(
            queue.registry,
            queue.clock,
            self._watchdog,
            progress=self._progress,
            scope=scope,
            threads=self._threads,
            tracebacks=self.options.log_tracebacks,
            max_result_bytes=queue.options.max_result_bytes,
            redactor=self.options.redactor,
            leases=self.leases,
            reads=queue.store,
        )
        self._summary = JobSummary(queue.clock, self.options.summary_interval)
        self._report = OutcomeReport(self._summary)
        self._shutdown = Shutdown(self.options.shutdown_grace)
        self._acker = Acknowledger(
            self.leases, on_written=self._written, on_error=self._shutdown.fail, outage=self.outage
        )
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
            listen=not self.options.polling_only,
            outage=self.outage,
        )

    async def close(self) -> None:
        """Release the handler threads (abandoned synchronous handlers are not waited for)."""
        await self._acker.close()
        await self._watchdog.close()
        await self._progress.close()
        await self._hooks.close()
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

    @property
    def abandoned_at_stop(self) -> list[AbandonedJob]:
        """Jobs the last :meth:`run` cancelled at its stop, with when they run again."""
        return self._shutdown.abandoned

    @property
    def threads_at_stop(self) -> int:
        """Synchronous handlers running when the last stop began."""
        return self._shutdown.threads_at_stop

    @property
    def threads_abandoned(self) -> int:
        """Synchronous handlers still running when :meth:`run` returned (abandoned: nothing
        waits for them, the process may exit)."""
        return self._shutdown.threads_abandoned

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
        cancelling = self._shutdown.request(immediate=immediate)
        grace = timedelta(0) if cancelling else self.options.shutdown_grace
        return Stopping(self.in_flight, grace, cancelling)

    async def run(self, queues: str | Sequence[str]) -> None:
        """Process ``queues`` until :meth:`stop` is called or the database fails.

        While the database is unreachable (a lost or refused connection, a server restarting,
        a failover under way) the run carries on for up to ``outage_window``
        (:attr:`~caravel.WorkerOptions.outage_window`): claims, acknowledgements, renewals and
        the paused set's reads are tried again after pauses, handlers in flight keep running
        under their leases, and the run reconnects once the database answers again. An outage
        that lasts longer, or any other database error, stops it.

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
        self._shutdown.begin()
        await self.queue.check_schema()
        await self._limits.declare(self.queue.registry.limits, self.queue.clock.now_ms())
        await self._presence.register(names)
        self._summary.reset()
        await self._paused.refresh(names)  # before the first claim
        loops = Supervisor(self._shutdown.fail)
        for fetcher in self._fetchers(names):
            loops.start(fetcher.run(), f"fetch-{fetcher.queue}")
        loops.start(self._paused.run(), "paused")
        loops.start(self.outage.run(), "outage")
        loops.start_side(self._presence.run(), "heartbeat")
        loops.start_side(self._summary.run(), "summary")
        interval = self.options.queue_metrics_interval
        if interval is not None:
            gauges = QueueGaugeCollector(self.queue.store, self.queue.clock, interval)
            loops.start_side(gauges.run(), "gauges")
        self._start_cancel_watch(loops)
        retention = self.options.retention
        if retention is not None and retention.enabled:
            pruner = Pruner(
                self.queue.store, self.queue.clock, retention, self.options.prune_interval
            )
            loops.start_side(pruner.run(), "prune")
        schedules = self.queue.registry.schedules
        if schedules and self.options.schedules:
            # Only a registry with schedules needs the scheduler and the cron parser it brings.
            from caravel.worker.scheduler import Scheduler

            scheduler = Scheduler(self.queue, schedules)
            loops.start_side(scheduler.run(), "schedules")
        listener = (
            None
            if self.options.polling_only
            else WakeupListener.for_store(self.queue.store, names, self.queue.wakeups)
        )
        if listener is not None:
            loops.start_side(listener.run(), "listen")
        for name in names:
            self.queue.wakeups.event(name)
        try:
            await self._shutdown.requested.wait()
        finally:
            await loops.cancel()
            await self._shutdown.drain(
                self._slots.tasks, self._threads, self._watchdog, self._acker
            )
            self._summary.run_once()  # what finished since the last summary, stopping included
            await self._hooks.close()  # the calls the last outcomes queued, each bounded
            # After a fault the database is likely unusable: the worker shows as lost instead.
            if self._shutdown.fault is None:
                await self._presence.deregister()
            self._shutdown.end()
        if self._shutdown.fault is not None:
            raise self._shutdown.fault

    def _written(self, claimed: ClaimedJob, outcome: Outcome, held: bool) -> None:
        """An outcome reached the database: reported, and for a limited queue its slot is
        free, so the queue's fetcher is woken to claim again."""
        self._report.written(claimed, outcome, held)
        if claimed.queue in self._limits:
            self.queue.wakeups.notify({claimed.queue})
        hook = self.options.on_dead_letter
        # Only a write that held: a refused one changed nothing, the job is not this worker's.
        if hook is not None and held and outcome.dead_letter:
            self._hooks.emit("on_dead_letter", hook, dead_letter_event(claimed, outcome))

    def _stuck(self, event: StuckEvent) -> None:
        """The watchdog reported a handler stuck: the application's hook is queued."""
        hook = self.options.on_stuck
        if hook is not None:
            self._hooks.emit("on_stuck", hook, event)

    def _start_cancel_watch(self, loops: Supervisor) -> None:
        """The loops that cancel handlers of jobs an operator cancelled: polling, and following
        the store's pushed notices where it has them."""
        watch = CancelWatch(
            self.queue.store, self._watchdog, self.queue.clock, self.options.poll_interval
        )
        loops.start_side(watch.run(), "cancel-poll")
        notices = None if self.options.polling_only else watch.notices()
        if notices is not None:
            loops.start_side(watch.listen(notices), "cancel-listen")

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
                stopping=self._shutdown.requested,
                paused=self._paused,
                limits=self._limits,
                outage=self.outage,
            )
            for name in names
        ]

    async def _job(self, claimed: ClaimedJob) -> None:
        try:
            outcome = await self._execute(claimed)
            if outcome.abandoned is Abandoned.INTERRUPTED:
                self._shutdown.interrupted(claimed, outcome.lease)
            if outcome.abandoned is not None:
                return
            if not self._acker.has_room():
                await self._acker.room()
            # The slot frees now; the acknowledger writes the outcome with the next batch.
            self._acker.post(claimed, outcome)
        except asyncio.CancelledError:
            self._shutdown.cancelled(claimed)
        except Exception as exc:
            self._shutdown.fail(exc)
