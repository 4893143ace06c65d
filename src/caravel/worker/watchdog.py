"""One watchdog for the leases of every job a worker is running.

Each running job registers its lease here. A single loop sleeps until the earliest moment any
lease needs attention (its deadline, or its next renewal when renewal is on), so a job costs a heap
entry instead of a timer of its own. At that moment the loop:

* renews the lease (``lease_renewal_interval``), never as an attempt;
* or cancels the job's task, marking why: the lease ran out, a renewal was rejected (the job was
  taken over or finished), or the claim reached ``max_lease_lifetime``;
* or, when a renewal fails because the database is unreachable, tries it again after a pause
  (see :mod:`~caravel.worker.outage`), the handler running on until its lease's deadline;
* or, when a renewal fails otherwise (or the outage outlasts the worker's window), cancels the
  job's task with that error attached, so the job raises it and the worker stops;
* or, at the job's execution timeout, asks its handler to stop (its cancellation signal is set,
  an async handler's task is cancelled; a synchronous handler's thread cannot be interrupted),
  marking the attempt timed out. Renewal goes on while the handler stops. A handler still
  running ``timeout_grace`` later is reported stuck (a WARNING, ``caravel.jobs.stuck`` and the
  ``on_stuck`` callback, which only queues the application's hook) and its lease is renewed no
  more; when the lease ends, the job's task is cancelled and the attempt
  recorded as timed out, its handler's thread (if any) left to return on its own.

An operator's cancel of a running job (:mod:`caravel.worker.cancels` hears of it) ends the job's
task the same way a lost lease does, through :meth:`LeaseWatchdog.cancel`.

A renewed lease's next renewal is due one interval after the moment the renewal computed the new
expiry, not after the renewal returned: a renewal slow to return must not push the next one
towards (or past) the expiry.

Timing uses the queue's clock, so a test's :class:`~caravel.testing.ManualClock` drives it, and
:meth:`LeaseWatchdog.run_once` attends to what is due without waiting.
"""

from __future__ import annotations

import asyncio
import enum
import heapq
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from uuid import UUID

from caravel.clock import duration_ms, woken_or_at
from caravel.context import JobContext
from caravel.errors import StoreError
from caravel.hooks import StuckEvent
from caravel.jobs import Lease
from caravel.telemetry import record_renewal, record_stuck
from caravel.worker.ending import cancel_and_wait
from caravel.worker.leases import Leases
from caravel.worker.outage import Outage, is_outage

__all__ = ["Abandoned", "LeaseWatchdog", "Watched"]

logger = logging.getLogger("caravel.worker")

#: How long a timed-out handler may take to stop unless the worker says otherwise.
DEFAULT_TIMEOUT_GRACE = timedelta(seconds=30)


class Abandoned(enum.StrEnum):
    """Why a job's attempt ended without an acknowledgement."""

    LEASE_EXPIRED = "lease_expired"
    LEASE_LOST = "lease_lost"
    LIFETIME_REACHED = "lifetime_reached"
    SHUTDOWN = "shutdown"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"
    """The handler raised ``KeyboardInterrupt``: a request to stop, so the worker stops."""


@dataclass(eq=False, slots=True)
class Watched:
    """One running job's lease, as the watchdog sees it."""

    task: asyncio.Task[object]
    lease: Lease
    context: JobContext[object]
    renew_at: int | None
    active: bool = True
    reason: Abandoned | None = None
    error: BaseException | None = field(default=None)
    #: Bumped on every reschedule; heap items of an older version are stale and skipped.
    version: int = 0
    #: A renewal is in flight (in its own task); the deadline is still enforced meanwhile.
    renewing: bool = False
    #: When the attempt times out (ms), if it has an execution timeout.
    timeout_at: int | None = None
    #: The job's execution timeout in ms (for the log line), if any.
    timeout_ms: int | None = None
    #: Whether the job's task is cancelled at the timeout (an async handler) or only asked.
    cancel_at_timeout: bool = True
    #: The timeout passed: the handler was asked to stop, and the attempt failed as timed out.
    timed_out: bool = False
    #: The handler outlived the timeout and the grace: reported, its lease renewed no more.
    stuck: bool = False
    #: How many times the watchdog cancelled the job's task (the runner takes them all back).
    cancels: int = 0
    #: Renewals failed in a row because the database was unreachable.
    renew_failures: int = 0


class LeaseWatchdog:
    """The watchdog; :meth:`watch` registers the current task's lease, :meth:`release` ends it.
    The loop (:meth:`run`) starts with the first watched lease."""

    def __init__(
        self,
        leases: Leases,
        *,
        timeout_grace: timedelta = DEFAULT_TIMEOUT_GRACE,
        on_stuck: Callable[[StuckEvent], None] | None = None,
        outage: Outage | None = None,
    ) -> None:
        self._leases = leases
        self._outage = outage
        self._on_stuck = on_stuck
        self._clock = leases.clock
        renewal = leases.options.lease_renewal_interval
        self._renew_every = None if renewal is None else duration_ms(renewal)
        self._grace_ms = duration_ms(timeout_grace)
        self._heap: list[tuple[int, int, int, Watched]] = []
        self._renewals: set[asyncio.Task[None]] = set()
        self._order = itertools.count()
        self._active = 0
        self._target: int | None = None
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.Task[None] | None = None

    def watch(
        self,
        lease: Lease,
        context: JobContext[object],
        *,
        timeout_ms: int | None = None,
        cancel_at_timeout: bool = True,
    ) -> Watched:
        """Watch ``lease`` for the job running in the current task; with ``timeout_ms``, the
        attempt times out that long from now (its task cancelled then only when
        ``cancel_at_timeout``: a synchronous handler is only asked, through its signal)."""
        task = asyncio.current_task()
        assert task is not None, "watch() runs inside the job's task"
        now = self._clock.now_ms()
        renew_at = None if self._renew_every is None else now + self._renew_every
        entry = Watched(
            task=task,
            lease=lease,
            context=context,
            renew_at=renew_at,
            timeout_at=None if timeout_ms is None else now + timeout_ms,
            timeout_ms=timeout_ms,
            cancel_at_timeout=cancel_at_timeout,
        )
        self._active += 1
        self._schedule(entry)
        if self._loop is None or self._loop.done():
            self._wake = asyncio.Event()
            self._loop = asyncio.create_task(self.run(), name="caravel-lease-watch")
        return entry

    def release(self, entry: Watched) -> None:
        """The job is done with its lease; the watchdog forgets it (no more cancellation)."""
        if entry.active:
            entry.active = False
            self._active -= 1
        # Finished entries are dropped lazily; rebuild when they far outnumber live ones.
        if len(self._heap) > 64 and len(self._heap) > 4 * self._active:
            self._heap = [item for item in self._heap if self._current(item)]
            heapq.heapify(self._heap)

    def current_leases(self) -> dict[UUID, Lease]:
        """The lease, as last renewed, of every job still watched."""
        return {item[3].lease.job_id: item[3].lease for item in self._heap if item[3].active}

    def cancel(self, job_id: UUID) -> bool:
        """An operator cancelled the job ``job_id``: cancel its handler, as a lost lease does.
        Whether this worker was running it."""
        found = [
            item[3] for item in self._heap if item[3].active and item[3].lease.job_id == job_id
        ]
        for entry in found:
            self._abandon(entry, Abandoned.CANCELLED)
        return bool(found)

    async def close(self) -> None:
        loop, self._loop = self._loop, None
        # A renewal's driver may swallow the first cancel: cancel_and_wait cancels again.
        await cancel_and_wait([*self._renewals, *([loop] if loop is not None else [])])

    @staticmethod
    def _current(item: tuple[int, int, int, Watched]) -> bool:
        return item[3].active and item[2] == item[3].version

    def _next_event(self, entry: Watched) -> int:
        at = self._leases.deadline_ms(entry.lease)
        if entry.renew_at is not None and not entry.renewing:
            at = min(at, entry.renew_at)
        timeout_at = entry.timeout_at
        if timeout_at is not None and not entry.stuck:
            at = min(at, timeout_at + self._grace_ms if entry.timed_out else timeout_at)
        return at

    def _schedule(self, entry: Watched) -> None:
        at = self._next_event(entry)
        entry.version += 1
        heapq.heappush(self._heap, (at, next(self._order), entry.version, entry))
        if self._wake is not None and (self._target is None or at < self._target):
            self._wake.set()

    def _abandon(self, entry: Watched, reason: Abandoned | None) -> None:
        """End the job's attempt: release it and cancel its task, marking why (``None`` for a
        timed-out attempt, which the runner records as such)."""
        if not entry.active:
            return
        entry.reason = reason
        self.release(entry)
        entry.context.cancelled.set()
        self._cancel_task(entry)

    @staticmethod
    def _cancel_task(entry: Watched) -> None:
        entry.cancels += 1
        entry.task.cancel()

    async def run(self) -> None:
        """Attend to leases as their moments come, sleeping on the clock in between."""
        if self._wake is None:
            self._wake = asyncio.Event()
        while True:
            self._target = await self.run_once()
            self._wake.clear()
            await self._sleep(self._target)

    async def run_once(self) -> int | None:
        """Attend to every lease whose moment has come by the clock: renew it, or cancel its
        job. Returns when the next lease needs attention (``None`` when none is watched)."""
        while True:
            while self._heap and not self._current(self._heap[0]):
                heapq.heappop(self._heap)
            now = self._clock.now_ms()
            if not self._heap or self._heap[0][0] > now:
                return self._heap[0][0] if self._heap else None
            entry = heapq.heappop(self._heap)[3]
            renewal = self._attend(entry, now)
            if renewal is not None:
                await self._await_renewal(renewal, now)

    async def _sleep(self, until_ms: int | None) -> None:
        assert self._wake is not None
        await woken_or_at(self._clock, self._wake, until_ms)

    async def _await_renewal(self, renewal: asyncio.Task[None], now: int) -> None:
        """Give a renewal the time until the next event on the watch (a deadline, another
        renewal): normally it finishes long before; a stuck one is left running in its task and
        every deadline is still enforced on time."""
        while self._heap and not self._current(self._heap[0]):
            heapq.heappop(self._heap)
        if not self._heap:
            return
        budget_ms = max(0, self._heap[0][0] - now)
        await asyncio.wait({renewal}, timeout=budget_ms / 1000)

    def _attend(self, entry: Watched, now: int) -> asyncio.Task[None] | None:
        """Act on one entry whose event time came; returns the renewal started, if any."""
        leases = self._leases
        renewing = self._renew_every is not None
        lifetime_over = now >= leases.lifetime_end_ms(entry.lease)
        if now >= leases.deadline_ms(entry.lease):
            if entry.timed_out:  # a timed-out attempt, not a lost lease, whatever held it up
                self._abandon(entry, None)
                return None
            reached = renewing and lifetime_over
            self._abandon(entry, Abandoned.LIFETIME_REACHED if reached else Abandoned.LEASE_EXPIRED)
            return None
        self._time_out(entry, now)
        if entry.renewing or entry.renew_at is None or now < entry.renew_at:
            self._schedule(entry)
            return None
        if lifetime_over:
            self._abandon(entry, Abandoned.LIFETIME_REACHED)
            return None
        # Renew in a task of its own: a renewal stuck on a dead connection must not keep the
        # watchdog from enforcing every other deadline (this job's included).
        entry.renewing = True
        self._schedule(entry)
        task = asyncio.create_task(self._renew(entry, now), name="caravel-lease-renewal")
        self._renewals.add(task)
        task.add_done_callback(self._renewals.discard)
        return task

    def _time_out(self, entry: Watched, now: int) -> None:
        """At the timeout, ask the handler to stop; ``timeout_grace`` later, report it stuck if
        it has not, and renew its lease no more."""
        timeout_at = entry.timeout_at
        if timeout_at is None or entry.stuck or now < timeout_at:
            return
        if not entry.timed_out:
            entry.timed_out = True
            entry.context.cancelled.set()
            if entry.cancel_at_timeout:
                self._cancel_task(entry)
        if now < timeout_at + self._grace_ms:
            return
        entry.stuck = True
        entry.renew_at = None
        context = entry.context
        record_stuck(context.queue, context.job_type)
        logger.warning(
            "job handler stuck past its timeout: lease no longer renewed",
            extra={
                "job_id": str(context.job_id),
                "queue": context.queue,
                "job_type": context.job_type,
                "attempt": context.attempt,
                "timeout_ms": entry.timeout_ms,
                "grace_ms": self._grace_ms,
            },
        )
        if self._on_stuck is not None:
            self._on_stuck(
                StuckEvent(
                    job_id=context.job_id,
                    queue=context.queue,
                    job_type=context.job_type,
                    tenant_id=context.tenant_id,
                    attempt=context.attempt,
                    timeout=timedelta(milliseconds=entry.timeout_ms or 0),
                    overdue=timedelta(milliseconds=now - timeout_at),
                )
            )

    async def _renew(self, entry: Watched, now: int) -> None:
        try:
            renewed = await self._leases.renew(entry.lease, now=now)
        except Exception as exc:
            entry.renewing = False
            if entry.active and self._retry_later(entry, exc):
                return
            if entry.active:  # the database failed: the job raises it, the worker stops
                entry.error = exc
                self.release(entry)
                entry.context.cancelled.set()
                self._cancel_task(entry)
            return
        entry.renewing = False
        entry.renew_failures = 0
        if self._outage is not None:
            self._outage.ended()
        if not entry.active:
            return
        if renewed is None:
            self._abandon(entry, Abandoned.LEASE_LOST)
            return
        entry.lease = renewed
        record_renewal(entry.context.queue)
        assert self._renew_every is not None
        # From the moment the new expiry was computed, however long the renewal took to return;
        # a stuck handler's lease is renewed no more.
        entry.renew_at = None if entry.stuck else now + self._renew_every
        self._schedule(entry)

    def _retry_later(self, entry: Watched, exc: Exception) -> bool:
        """Whether a renewal that failed with ``exc`` is tried again after a pause: the
        database is unreachable and the worker's outage window is not used up. The lease's
        deadline still holds meanwhile."""
        if self._outage is None or not is_outage(exc):
            return False
        try:
            pause = self._outage.pause(exc, entry.renew_failures)
        except StoreError:
            return False
        entry.renew_failures += 1
        later = self._clock.now_ms() + max(1, round(pause * 1000))
        entry.renew_at = None if entry.stuck else later
        self._schedule(entry)
        return True
