"""Writing what running handlers report (``ctx.progress``, ``ctx.set_meta``): coalesced per job,
fenced by the job's lease.

The runner tracks each job's :class:`~caravel.progress.ProgressReport` here while its handler
runs. A report that changes is written at once when the job has not written for
``progress_interval``, otherwise when the interval since its last write ends, with the latest
values then (the ones in between are never written): at most one write per interval per job,
however often the handler reports. One loop sleeps on the clock until the next write is due, as
the lease watchdog does, and :meth:`ProgressWriter.run_once` writes what is due without waiting.

When the handler has stopped, :meth:`ProgressWriter.finish` writes what is still pending before
the runner hands the outcome on, so the last report is always stored before the outcome (which
would fence it off). Every write presents the job's lease, as an acknowledgement does: once the
job was taken over, finished or cancelled the write changes nothing, and the writer logs it and
sends nothing more for that attempt. A write the database fails is logged (its error type only)
and tried again an interval later; the last one, in :meth:`~ProgressWriter.finish`, is tried
again within the worker's outage window when the database is unreachable (as an acknowledgement
is, :mod:`~caravel.worker.outage`), and otherwise raises, as a failed acknowledgement does.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
from dataclasses import dataclass, field
from datetime import timedelta

from caravel.clock import Clock, duration_ms, woken_or_at
from caravel.errors import StoreError
from caravel.jobs import ClaimedJob
from caravel.progress import ProgressReport
from caravel.store.protocol import ProgressUpdate, Store
from caravel.worker.ending import cancel_and_wait
from caravel.worker.outage import Outage

__all__ = ["ProgressWriter", "Tracked"]

logger = logging.getLogger("caravel.worker")


@dataclass(eq=False, slots=True)
class Tracked:
    """One running job's report, as the writer sees it."""

    claimed: ClaimedJob
    report: ProgressReport = field(default_factory=ProgressReport)
    #: When its last write began (ms), if it wrote.
    last_ms: int | None = None
    #: A write is scheduled (an entry on the heap).
    due: bool = False
    #: The handler stopped: nothing more is scheduled.
    closed: bool = False
    #: A write was refused (the lease is no longer the job's): nothing more is sent.
    refused: bool = False
    #: The write in flight, if any.
    writing: asyncio.Future[None] | None = None


class ProgressWriter:
    """Writes the reports of every job a worker runs through ``store``, at most once per
    ``interval`` per job. The loop (:meth:`run`) starts with the first report."""

    def __init__(
        self, store: Store, clock: Clock, interval: timedelta, *, outage: Outage | None = None
    ) -> None:
        self._store = store
        self._outage = outage
        self._clock = clock
        self._interval_ms = duration_ms(interval)
        self._heap: list[tuple[int, int, Tracked]] = []
        self._order = itertools.count()
        self._target: int | None = None
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.Task[None] | None = None

    def track(self, claimed: ClaimedJob) -> Tracked:
        """Start tracking the report of ``claimed``'s handler (its context's ``report``)."""
        entry = Tracked(claimed)
        loop = asyncio.get_running_loop()

        def changed() -> None:  # in the reporting thread, the event loop's or a handler's
            with contextlib.suppress(RuntimeError):  # the loop closed: nothing writes any more
                loop.call_soon_threadsafe(self._changed, entry)

        entry.report.listen(changed)
        return entry

    async def finish(self, entry: Tracked, *, write: bool = True) -> None:
        """The handler stopped: write what it reported since the last write (unless
        ``write`` is false: its attempt ended without an outcome), after any write of it still
        in flight, and track it no more. A database failure of that write raises."""
        entry.closed = True
        entry.report.listen(None)
        if entry.writing is not None:
            await asyncio.shield(entry.writing)
        failures = 0  # final writes failed in a row by an outage
        while write and not entry.refused:
            try:
                await self._write(entry, final=True)
            except StoreError as exc:
                if self._outage is None:
                    raise
                await self._outage.wait(exc, failures)  # raises once the window is used up
                failures += 1
                continue
            return

    def drop(self, entry: Tracked) -> None:
        """Track ``entry`` no more, writing nothing (its task is being cancelled)."""
        entry.closed = True
        entry.report.listen(None)

    async def close(self) -> None:
        loop, self._loop = self._loop, None
        if loop is not None:
            # Its write's driver may swallow the first cancel: cancel_and_wait cancels again.
            await cancel_and_wait([loop])

    def _changed(self, entry: Tracked) -> None:
        """A report arrived while nothing was pending: schedule its write."""
        if entry.closed or entry.refused or entry.due:
            return
        entry.due = True
        now = self._clock.now_ms()
        last = entry.last_ms
        at = now if last is None else max(now, last + self._interval_ms)
        heapq.heappush(self._heap, (at, next(self._order), entry))
        if self._loop is None or self._loop.done():
            self._wake = asyncio.Event()
            self._loop = asyncio.create_task(self.run(), name="caravel-progress")
        elif self._wake is not None and (self._target is None or at < self._target):
            self._wake.set()

    async def run(self) -> None:
        """Write reports as they come due, sleeping on the clock in between."""
        if self._wake is None:
            self._wake = asyncio.Event()
        while True:
            self._target = await self.run_once()
            self._wake.clear()
            await self._sleep(self._target)

    async def run_once(self) -> int | None:
        """Write every report due by the clock. Returns when the next one is due (``None``
        when none is scheduled)."""
        while self._heap:
            at, _, entry = self._heap[0]
            if at > self._clock.now_ms():
                return at
            heapq.heappop(self._heap)
            entry.due = False
            if not (entry.closed or entry.refused):
                await self._write(entry, final=False)
        return None

    async def _sleep(self, until_ms: int | None) -> None:
        assert self._wake is not None
        await woken_or_at(self._clock, self._wake, until_ms)

    async def _write(self, entry: Tracked, *, final: bool) -> None:
        progress, meta = entry.report.take()
        if progress is None and meta is None:
            return
        now = self._clock.now_ms()
        entry.last_ms = now
        written: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry.writing = written
        claimed = entry.claimed
        try:
            held = await self._store.job_set_progress(
                ProgressUpdate(claimed.lease, now, progress, meta)
            )
        except Exception as exc:
            # Kept for the next write (unless newer values came): an interval from this one, or
            # the final write's retry.
            entry.report.put_back(progress, meta)
            if final:
                raise
            logger.warning(
                "job progress not written: %s",
                type(exc).__name__,
                extra=_fields(claimed, error_type=type(exc).__name__),
            )
            self._changed(entry)
            return
        finally:
            entry.writing = None
            written.set_result(None)
        if not held:
            entry.refused = True
            logger.warning(
                "job progress refused: the job's lease is no longer this worker's; "
                "nothing more is sent for this attempt",
                extra=_fields(claimed),
            )


def _fields(claimed: ClaimedJob, **more: object) -> dict[str, object]:
    return {
        "job_id": str(claimed.job_id),
        "queue": claimed.queue,
        "job_type": claimed.job_type,
        "attempt": claimed.attempt,
        **more,
    }
