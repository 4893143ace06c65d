"""Claiming work for the continuous worker: one fetcher per queue, sharing the worker's handler
slots.

A claim asks for every free slot at once, up to half of all slots. After a full batch the
fetcher goes again as soon as a quarter of the slots are free (so a busy worker claims in large
batches instead of one job per finished handler); after a short batch the queue is drained for
now and it waits for a wake-up or the poll interval. The cap at half keeps the next claim in
flight while the handlers of the previous batch run (``docs/performance.md`` has the
measurements).

Recovery: the batches a fetcher claims hold only waiting jobs. Jobs whose lease expired (their
worker crashed or stalled) are taken over one at a time, at most one per process at once, looked
for every ``poll_interval`` and again as soon as the previous one finishes. A job that kills its
worker would otherwise be claimed again in a batch with the jobs that died beside it, and take
them down with it on every retry until all of their attempts were spent. The look for an expired
lease comes before the claim of waiting jobs, except right after a wake-up and in the fetcher's
first step: then the waiting jobs are claimed first and the look follows (at the latest in the
fetcher's next step), so that its round trip is not added to that job's wake-up, nor to the
time a starting worker takes to its first job.

Limits: for a queue with a concurrency limit (as the worker last read it) every claim is a
limited one (:class:`~caravel.store.values.ClaimRequest`), asking for no more than the queue's
overall limit. When such a claim comes back short, the queue may be at its limit rather than
drained: the worker wakes the fetcher again as soon as the outcome of one of its own jobs of
that queue is written (another worker's finished jobs are seen at the next wake-up or poll).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from caravel._failpoints import failpoint
from caravel.clock import Clock, duration_ms
from caravel.errors import StoreError
from caravel.flow.following import LimitedQueues
from caravel.jobs import ClaimedJob
from caravel.options import WorkerOptions
from caravel.signals import WakeupHub
from caravel.worker.leases import Leases
from caravel.worker.outage import Outage
from caravel.worker.pausing import PausedQueues

__all__ = ["Fetcher", "Slots"]

JobTask = Callable[[ClaimedJob], Coroutine[Any, Any, None]]


class Slots:
    """The worker's handler slots: the tasks running jobs, the slots fetchers have taken for a
    claim in flight, and the one job taken over from an expired lease (at most one per process
    at once).

    Every fetcher of the worker shares these slots across awaits, so a fetcher takes the slots
    it asks for (:meth:`take`) before its claim goes out and gives back what the claim did not
    fill (:meth:`give_back`) in the same step that starts the jobs it got, with no await in
    between. Two fetchers can then never count the same free slot, and running plus taken never
    exceeds the concurrency."""

    def __init__(self, concurrency: int, run_job: JobTask) -> None:
        self.concurrency = concurrency
        self.tasks: set[asyncio.Task[None]] = set()
        #: Slots taken by claims in flight, not yet running a job or given back.
        self.taken = 0
        self._run_job = run_job
        self._freed = asyncio.Event()
        #: The job taken over from an expired lease that is running, with its queue.
        self.recovering: tuple[asyncio.Task[None], str] | None = None
        #: Whether a fetcher's look for an expired lease is in flight (one per process).
        self.looking = False
        #: Per queue, the clock time (ms) at which to look for expired leases next.
        self.recovery_due: dict[str, int] = {}

    @property
    def free(self) -> int:
        """Slots neither running a job nor taken by a claim in flight (never negative)."""
        return self.concurrency - len(self.tasks) - self.taken

    def take(self, wanted: int) -> int:
        """Take up to ``wanted`` free slots for a claim; how many were taken (0 when none is
        free). Synchronous, so no other fetcher runs between the count and the taking."""
        count = max(0, min(wanted, self.free))
        self.taken += count
        return count

    def take_for_recovery(self) -> bool:
        """Take a slot to look for one expired lease: only when one is free and no other
        taken-over job runs or is being looked for in this process."""
        if self.recovering is not None or self.looking or not self.take(1):
            return False
        self.looking = True
        return True

    def give_back(
        self, taken: int, claimed: Sequence[ClaimedJob], *, recovered: str | None = None
    ) -> None:
        """End a claim that took ``taken`` slots: start each job it ``claimed`` in one of them
        and free the rest. ``recovered`` names the queue when the job was taken over from an
        expired lease."""
        if len(claimed) > taken:  # the store returns at most the limit it was given
            raise RuntimeError("a claim returned more jobs than the slots it took")
        self.taken -= taken
        if recovered is not None:
            self.looking = False
        for job in claimed:
            self.start(job, recovered=recovered)
        if len(claimed) < taken:
            self._freed.set()

    async def freed(self) -> None:
        """Wait until a running job finishes or a claim gives slots back."""
        self._freed.clear()
        await self._freed.wait()

    def start(self, claimed: ClaimedJob, *, recovered: str | None = None) -> asyncio.Task[None]:
        """Run ``claimed`` in a task of its own; ``recovered`` names the queue when it was taken
        over from an expired lease."""
        # One name for every job's task: formatting the job id into each name was a measurable
        # part of starting it.
        task = asyncio.create_task(self._run_job(claimed), name="caravel-job")
        self.tasks.add(task)
        task.add_done_callback(self._finished)
        if recovered is not None:
            self.recovering = (task, recovered)
        return task

    def _finished(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if self.recovering is not None and self.recovering[0] is task:
            # Look for the next expired lease of that queue right away.
            self.recovery_due.pop(self.recovering[1], None)
            self.recovering = None
        self._freed.set()


class Fetcher:
    """Claims jobs of one queue into the worker's :class:`Slots` until ``stopping`` is set."""

    def __init__(
        self,
        queue: str,
        leases: Leases,
        slots: Slots,
        *,
        wakeups: WakeupHub,
        options: WorkerOptions,
        clock: Clock,
        push: bool,
        stopping: asyncio.Event,
        paused: PausedQueues | None = None,
        limits: LimitedQueues | None = None,
        outage: Outage | None = None,
    ) -> None:
        self.queue = queue
        #: The worker's outage window: a claim the database could not answer is tried again
        #: within it (without one, every database error propagates at once).
        self._outage = outage
        #: The worker's view of its queues' concurrency limits.
        self._limits = limits
        #: The worker's paused set: nothing is claimed from this queue while it is in it.
        self._paused = paused
        self._leases = leases
        self._slots = slots
        self._wakeups = wakeups
        self._clock = clock
        self._push = push and not options.polling_only
        #: Polling only: every idle wait is the queue's own interval, the cost the operator
        #: chose, rather than starting short after work and backing off.
        self._fixed = options.polling_only
        self._stopping = stopping
        self._poll_ms = duration_ms(options.poll_interval)
        self._longest = options.poll_interval_for(queue).total_seconds()
        self._min_poll = min(options.min_poll_interval.total_seconds(), self._longest)
        self._refill = max(1, options.concurrency // 4)
        self._batch = max(1, (options.concurrency + 1) // 2)

    async def run(self) -> None:
        """Claim while there are free slots; wait for a wake-up or the poll interval whenever
        the queue is drained for now. A claim that failed because the database is unreachable
        is tried again after a pause, within the worker's outage window; other database errors,
        and an outage that outlasts the window, propagate."""
        idle = self._min_poll
        event = self._wakeups.event(self.queue)
        woken = True  # a starting worker claims what is waiting first, as after a wake-up
        failures = 0  # claims failed in a row by an outage
        while not self._stopping.is_set():
            if self._slots.free < self._refill:
                await self._slots.freed()
                continue
            event.clear()
            if self._paused is not None and self.queue in self._paused:
                # Claim nothing; a resume, once read, signals the event (as a wake-up does).
                await self._wakeups.wait(self.queue, self._longest, self._clock.sleep)
                continue
            try:
                asked, claimed, _ = await self._step(ready_first=woken)
            except StoreError as exc:
                if self._outage is None:
                    raise
                await self._outage.wait(exc, failures)
                failures += 1
                woken = True  # back: claim what waits first, as after a wake-up
                continue
            failures = 0
            if self._outage is not None:
                self._outage.ended()
            woken = False
            if claimed:
                idle = self._min_poll
            if not asked or claimed == asked or (claimed and self._fair):
                # A full batch: there may be more right behind it. A fair claim reads only a
                # share of each key's jobs (caravel.flow.fairness.share), so one that took
                # anything may have left due jobs of a key with more than its share.
                continue
            woken = await self._wakeups.wait(
                self.queue, self._longest if self._push or self._fixed else idle, self._clock.sleep
            )
            if not self._push:
                idle = min(idle * 2, self._longest)

    @property
    def _limited(self) -> bool:
        return self._limits is not None and self.queue in self._limits

    @property
    def _fair(self) -> bool:
        limit = None if self._limits is None else self._limits.get(self.queue)
        return limit is not None and limit.fair

    def _wanted(self, slots: int) -> int:
        """At most ``slots``, and no more than the queue's overall limit."""
        limit = None if self._limits is None else self._limits.get(self.queue)
        if limit is not None and limit.concurrency is not None:
            return min(slots, limit.concurrency)
        return slots

    async def run_once(self) -> int:
        """One look at the queue, if enough slots are free: take over one expired lease when
        it is time, then claim a batch of waiting jobs and start them. Returns how many jobs
        were started."""
        if self._slots.free < self._refill:
            return 0
        _, claimed, recovered = await self._step()
        return claimed + recovered

    async def _step(self, *, ready_first: bool = False) -> tuple[int, int, int]:
        """How many waiting jobs were asked for and claimed, and how many expired leases were
        taken over (0 or 1); every job claimed is started. ``ready_first`` claims the waiting
        jobs before looking for an expired lease, with the slots they leave."""
        if ready_first:
            asked, claimed = await self._claim_ready()
            recovered = await self._recover()
        else:
            recovered = await self._recover()
            asked, claimed = await self._claim_ready()
        return asked, claimed, recovered

    async def _claim_ready(self) -> tuple[int, int]:
        """Claim and start waiting jobs in the slots free now (at most a batch); how many
        were asked for and claimed. Nothing is asked for when no slot is free."""
        slots = self._slots
        asked = slots.take(self._wanted(self._batch))
        if not asked:
            return 0, 0
        claimed: list[ClaimedJob] = []
        try:
            claimed = await self._leases.claim_many(
                self.queue, asked, source="ready", limited=self._limited
            )
            if claimed:
                failpoint("after_claim")
        finally:
            slots.give_back(asked, claimed)
        return asked, len(claimed)

    async def _recover(self) -> int:
        """Take over one job of this queue whose lease expired, when a slot is free, no other
        taken-over job runs in this process and it is time to look. Returns how many were
        started (0 or 1)."""
        slots = self._slots
        now = self._clock.now_ms()
        due = slots.recovery_due.get(self.queue, now)
        # Not yet due, unless the clock was set back by more than a poll interval meanwhile.
        if 0 < due - now <= self._poll_ms or not slots.take_for_recovery():
            return 0
        taken: list[ClaimedJob] = []
        try:
            taken = await self._leases.claim_many(
                self.queue, 1, source="expired", limited=self._limited
            )
            if taken:
                failpoint("after_claim")
        finally:
            slots.give_back(1, taken, recovered=self.queue)
        if not taken:
            slots.recovery_due[self.queue] = now + self._poll_ms
            return 0
        return 1
