"""The worker: claim jobs, run their handlers, record outcomes.

``run_once`` takes one step and is what tests and custom schedulers drive. ``run`` is the
continuous service built from the same pieces: one fetcher per queue claims as many jobs as there
are free handler slots, each job runs in its own task under its lease, and an acknowledger writes
outcomes in batches.

Stopping: :meth:`QueueWorker.stop` (the command line calls it on SIGTERM or SIGINT) stops
claiming, lets in-flight handlers finish and be acknowledged for ``shutdown_grace``, then cancels
the rest without acknowledging them; their jobs run again once their leases expire. A second stop
request cancels at once. A database failure while claiming, acknowledging or renewing stops the
worker too, and ``run`` raises it.

Recovery: the batches a fetcher claims hold only waiting jobs. Jobs whose lease expired (their
worker crashed or stalled) are taken over one at a time, at most one per process at once, looked
for every ``poll_interval`` and again as soon as the previous one finishes. A job that kills its
worker would otherwise be claimed again in a batch with the jobs that died beside it, and take
them down with it on every retry until all of their attempts were spent.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, Self
from uuid import uuid4

from caravel import telemetry
from caravel.acknowledger import Acknowledger
from caravel.errors import CaravelError, LeaseLostError, ValidationError
from caravel.execution import JobRunner, Outcome, ScopeFactory
from caravel.failpoints import failpoint
from caravel.jobs import ClaimedJob
from caravel.options import WorkerOptions
from caravel.queue import DatabaseQueue
from caravel.store.api import WorkerRecord
from caravel.validation import check_queue_name

__all__ = ["QueueWorker"]

logger = logging.getLogger("caravel.worker")


def _log(level: int, message: str, claimed: ClaimedJob, **fields: object) -> None:
    """One structured log line about a job: its id, queue, type and attempt, never its payload
    or a handler's exception text. Builds nothing when the level is off."""
    if logger.isEnabledFor(level):
        logger.log(
            level,
            message,
            extra={
                "job_id": str(claimed.job_id),
                "queue": claimed.queue,
                "job_type": claimed.job_type,
                "attempt": claimed.attempt,
                **fields,
            },
        )


class QueueWorker:
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
        self._threads = ThreadPoolExecutor(
            max_workers=self.options.concurrency, thread_name_prefix="caravel-job"
        )
        self._runner = JobRunner(queue, scope=scope, threads=self._threads)
        self._acker = Acknowledger(queue, on_written=self._written, on_error=self._failed)
        self._in_flight: set[asyncio.Task[None]] = set()
        #: The one job taken over from an expired lease that is running, with its queue.
        self._recovering: tuple[asyncio.Task[None], str] | None = None
        #: Per queue, the event-loop time at which to look for expired leases next.
        self._recovery_due: dict[str, float] = {}
        self._slot_freed = asyncio.Event()
        self._stop_requested = asyncio.Event()
        self._cancel_now = asyncio.Event()
        self._fault: BaseException | None = None
        self._run_ended = False
        self.lost_acknowledgements = 0
        #: This process's id in the worker registry (``caravel workers``).
        self.worker_id = uuid4()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Release the handler threads (abandoned synchronous handlers are not waited for)."""
        await self._acker.close()
        await self._runner.close()
        self._threads.shutdown(wait=False, cancel_futures=True)

    @property
    def in_flight(self) -> int:
        """Handlers running right now."""
        return len(self._in_flight)

    # ----- one step ------------------------------------------------------------------------

    async def run_once(self, queue: str) -> bool:
        """Claim at most one job of ``queue``, run it and record its outcome.

        Returns whether a job was claimed, not whether its handler succeeded. Database failures
        while claiming or acknowledging propagate; they are never recorded as job failures.
        """
        check_queue_name(queue)
        claimed = await self.queue.claim(queue)
        if claimed is None:
            return False
        failpoint("after_claim")
        outcome = await self._runner.run(claimed)
        failpoint("after_handler_before_ack")
        await self._record(claimed, outcome)
        failpoint("after_ack")
        return True

    async def _record(self, claimed: ClaimedJob, outcome: Outcome) -> None:
        """Persist one outcome now (``run_once``); the continuous worker posts outcomes to its
        acknowledger instead."""
        if outcome.abandoned is not None:
            self._abandoned(claimed, outcome)
            return
        held = True
        try:
            if outcome.failure is None:
                await self.queue.complete(outcome.lease)
            else:
                await self.queue.fail(outcome.lease, outcome.failure.value)
        except LeaseLostError:
            held = False
        self._written(claimed, outcome, held)

    def _abandoned(self, claimed: ClaimedJob, outcome: Outcome) -> None:
        assert outcome.abandoned is not None
        reason = outcome.abandoned.value
        telemetry.record_outcome(
            claimed, seconds=outcome.seconds, category=None, dead=False, abandoned=reason
        )
        _log(logging.WARNING, "job abandoned without acknowledgement", claimed, reason=reason)

    def _written(self, claimed: ClaimedJob, outcome: Outcome, held: bool) -> None:
        """An outcome reached the database (``held``) or was fenced off by a newer lease."""
        last = claimed.attempt >= claimed.lease.max_attempts
        category = None if outcome.failure is None else outcome.failure.value
        telemetry.record_outcome(
            claimed,
            seconds=outcome.seconds,
            category=category,
            dead=category is not None and last,
            abandoned=None if held else "ack_rejected",
        )
        if not held:
            self.lost_acknowledgements += 1
            _log(logging.WARNING, "job acknowledgement rejected: lease lost", claimed)
        elif category is not None:
            _log(logging.INFO, "job failed", claimed, category=category, dead_lettered=last)
        else:
            _log(logging.DEBUG, "job completed", claimed)

    # ----- continuous ----------------------------------------------------------------------

    def stop(self, *, immediate: bool = False) -> None:
        """Ask :meth:`run` to stop. The first request drains gracefully; a second one (or
        ``immediate=True``) cancels in-flight handlers at once."""
        if self._stop_requested.is_set() or immediate:
            self._cancel_now.set()
        self._stop_requested.set()

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
        await self.queue.check_schema()
        await self._register(names)
        hub = self.queue.wakeups
        services = [
            asyncio.create_task(self._fetch_loop(name), name=f"caravel-fetch-{name}")
            for name in names
        ]
        services.append(asyncio.create_task(self._heartbeat(), name="caravel-heartbeat"))
        if self.options.queue_metrics_interval is not None:
            services.append(
                asyncio.create_task(self._collect_queue_metrics(), name="caravel-gauges")
            )
        feed = self.queue.store.wakeups(names)
        if feed is not None:
            services.append(asyncio.create_task(self._listen(feed), name="caravel-listen"))
        for name in names:
            hub.event(name)
        try:
            await self._stop_requested.wait()
        finally:
            for task in services:
                task.cancel()
            await asyncio.gather(*services, return_exceptions=True)
            await self._drain()
            await self._deregister()
            self._run_ended = True
        if self._fault is not None:
            raise self._fault

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
        if self._in_flight and not self._cancel_now.is_set():
            grace = self.options.shutdown_grace.total_seconds()
            pending: asyncio.Future[Any] = asyncio.gather(*self._in_flight, return_exceptions=True)
            cancelled: asyncio.Future[Any] = asyncio.ensure_future(self._cancel_now.wait())
            try:
                await asyncio.wait(
                    {pending, cancelled}, timeout=grace, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                cancelled.cancel()
        for task in list(self._in_flight):
            task.cancel()
        if self._in_flight:
            await asyncio.gather(*self._in_flight, return_exceptions=True)
        if self._fault is None:
            await self._acker.close()
        else:
            await self._acker.abort()

    async def _fetch_loop(self, queue: str) -> None:
        """Claim jobs for ``queue`` while there are free handler slots.

        A claim asks for every free slot at once, up to half of all slots. After a full batch
        the fetcher goes again as soon as a quarter of the slots are free (so a busy worker
        claims in large batches instead of one job per finished handler); after a short batch
        the queue is drained for now and it waits for a wake-up or the poll interval. The cap
        at half keeps the next claim in flight while the handlers of the previous batch run:
        claiming every slot at once left the database idle while the handlers ran and the
        handlers idle while the claim ran (about 15,000 against 20,000 no-op jobs/s). Before a
        batch, when it is time, it takes over one job whose lease expired (see the module
        notes).
        """
        opts = self.options
        hub = self.queue.wakeups
        push = self.queue.store.supports_listen_notify
        idle = opts.min_poll_interval.total_seconds()
        longest = opts.poll_interval.total_seconds()
        refill = max(1, opts.concurrency // 4)
        batch = max(1, (opts.concurrency + 1) // 2)
        event = hub.event(queue)
        try:
            while not self._stop_requested.is_set():
                free = opts.concurrency - len(self._in_flight)
                if free < refill:
                    self._slot_freed.clear()
                    await self._slot_freed.wait()
                    continue
                event.clear()
                free = min(free - await self._recover(queue), batch)
                claimed = await self.queue.claim_many(queue, free, source="ready") if free else []
                if claimed:
                    failpoint("after_claim")
                    idle = opts.min_poll_interval.total_seconds()
                    for job in claimed:
                        self._start(job)
                if not free or len(claimed) == free:
                    continue  # a full batch: there may be more right behind it
                await hub.wait(queue, longest if push else idle)
                if not push:
                    idle = min(idle * 2, longest)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._failed(exc)

    async def _recover(self, queue: str) -> int:
        """Take over one job of ``queue`` whose lease expired, when no other taken-over job runs
        in this process and it is time to look. Returns how many were started (0 or 1)."""
        now = asyncio.get_running_loop().time()
        if self._recovering is not None or now < self._recovery_due.get(queue, 0.0):
            return 0
        taken = await self.queue.claim_many(queue, 1, source="expired")
        if not taken:
            self._recovery_due[queue] = now + self.options.poll_interval.total_seconds()
            return 0
        failpoint("after_claim")
        self._recovering = (self._start(taken[0]), queue)
        return 1

    def _start(self, claimed: ClaimedJob) -> asyncio.Task[None]:
        task = asyncio.create_task(self._job(claimed), name=f"caravel-job-{claimed.job_id}")
        self._in_flight.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._in_flight.discard(task)
        if self._recovering is not None and self._recovering[0] is task:
            # Look for the next expired lease of that queue right away.
            self._recovery_due.pop(self._recovering[1], None)
            self._recovering = None
        self._slot_freed.set()

    async def _job(self, claimed: ClaimedJob) -> None:
        try:
            outcome = await self._runner.run(claimed)
            failpoint("after_handler_before_ack")
            if outcome.abandoned is not None:
                self._abandoned(claimed, outcome)
                return
            if not self._acker.has_room():
                await self._acker.room()
            # The slot frees now; the acknowledger writes the outcome with the next batch.
            self._acker.post(claimed, outcome)
        except asyncio.CancelledError:
            _log(
                logging.WARNING, "job abandoned without acknowledgement", claimed, reason="shutdown"
            )
        except Exception as exc:
            self._failed(exc)

    async def _register(self, queues: Sequence[str]) -> None:
        now = self.queue.clock.now_ms()
        await self.queue.store.worker_register(
            WorkerRecord(
                id=self.worker_id,
                host=socket.gethostname()[:255],
                pid=os.getpid(),
                queues=tuple(queues),
                concurrency=self.options.concurrency,
                started_at=now,
                heartbeat_at=now,
                in_flight=0,
            )
        )

    async def _heartbeat(self) -> None:
        """Keep this worker's registry row fresh. A failed heartbeat is logged, not fatal: the
        claim path notices a broken database on its own."""
        every = self.options.heartbeat_interval.total_seconds()
        while True:
            await asyncio.sleep(every)
            try:
                await self.queue.store.worker_heartbeat(
                    self.worker_id, self.queue.clock.now_ms(), len(self._in_flight)
                )
            except CaravelError:
                logger.warning("worker heartbeat could not be written")

    async def _deregister(self) -> None:
        if self._fault is not None:
            return  # the database is likely unusable; the row will show as lost
        try:
            await self.queue.store.worker_heartbeat(
                self.worker_id, self.queue.clock.now_ms(), 0, stopped=True
            )
        except CaravelError:
            logger.warning("worker could not record its shutdown")

    async def _collect_queue_metrics(self) -> None:
        """Publish queue depth and the oldest ready job's age as gauges (opt-in)."""
        assert self.options.queue_metrics_interval is not None
        every = self.options.queue_metrics_interval.total_seconds()
        gauges = telemetry.queue_gauges()
        while True:
            try:
                counts = await self.queue.queue_counts()
                gauges.update(counts, self.queue.clock.now_ms())
            except CaravelError:
                logger.warning("queue metrics could not be read; trying again")
            await asyncio.sleep(every)

    async def _listen(self, feed: AsyncIterator[str]) -> None:
        hub = self.queue.wakeups
        async for queue in feed:
            hub.notify((queue,))
