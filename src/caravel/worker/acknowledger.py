"""Recording outcomes: the one place that persists what a worker's attempts ended with, for the
continuous worker (in batches) and for ``run_once`` (at once) alike.

Handlers finish one by one; their outcomes are queued and written by two flushers, each with one
write in flight at a time. While writes are in flight the next outcomes accumulate, so under load
many acknowledgements share one statement and one commit (and two such statements overlap, one
being executed while the other's reply and commit travel), and when idle an outcome is written at
once. Every row is still guarded by its own lease token: a stale lease in a batch changes nothing
and is reported back to its job alone. A crash that loses queued acknowledgements only means those
jobs run again once their leases expire, which at-least-once delivery already allows.

A batch whose write failed because the database is unreachable (see
:mod:`~caravel.worker.outage`) goes back to the front of the queue and is written again after a
pause, within the worker's outage window. Its lease tokens fence the retry as they fence the
first try: an outcome whose job another worker took over meanwhile is refused and reported as
not held (a lost lease), and so is one whose first try had committed before its reply was lost.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from uuid import UUID

from caravel._failpoints import failpoint
from caravel.errors import StoreError
from caravel.jobs import ClaimedJob
from caravel.worker.ending import cancel_and_wait
from caravel.worker.leases import Leases
from caravel.worker.outage import Outage, is_outage
from caravel.worker.outcome import Outcome

__all__ = ["Acknowledger"]


Written = Callable[[ClaimedJob, Outcome, bool], None]


class Acknowledger:
    """Writes complete/fail outcomes for one worker.

    :meth:`write` records outcomes now (``run_once``). :meth:`post` queues an outcome and
    returns at once, so a finished handler frees its slot without waiting for the database.
    ``writers`` flushers write what is queued, one batch per statement each. Either way each
    outcome is reported through ``on_written(claimed, outcome, held)``
    (``held`` is false when the lease was no longer current and nothing changed). A write that
    fails because the database failed goes to ``on_error`` and stops its flusher; the outcomes it
    carried are lost, so those jobs run again once their leases expire. With an ``outage``
    window, a write that failed because the database is unreachable is tried again within it
    first.
    """

    def __init__(
        self,
        leases: Leases,
        *,
        on_written: Written,
        on_error: Callable[[BaseException], None],
        max_batch: int = 1000,
        max_pending: int = 5000,
        writers: int = 2,
        outage: Outage | None = None,
    ) -> None:
        self._leases = leases
        self._outage = outage
        self._on_written = on_written
        self._on_error = on_error
        self._max_batch = max_batch
        self._max_pending = max_pending
        self._pending: list[tuple[ClaimedJob, Outcome]] = []
        self._wake = asyncio.Event()
        self._drained = asyncio.Event()
        self._writers = writers
        self._flusher: asyncio.Future[list[None]] | None = None
        self._flush_tasks: list[asyncio.Task[None]] = []
        self._closing = False
        #: Which flusher is current: abort moves it on, and a flush loop of an earlier one stops
        #: at its next turn even if the cancel it was sent never reached it (a driver may swallow
        #: a cancellation that lands inside its own await).
        self._generation = 0

    async def write(self, batch: list[tuple[ClaimedJob, Outcome]]) -> set[UUID]:
        """Write ``batch`` now and report each outcome; the ids whose lease was still current.
        A database failure propagates to the caller (and nothing is reported)."""
        held = await self._write(batch)
        self._written(batch, held)
        return held

    def _written(self, batch: list[tuple[ClaimedJob, Outcome]], held: set[UUID]) -> None:
        failpoint("after_ack")
        for claimed, outcome in batch:
            self._on_written(claimed, outcome, outcome.lease.job_id in held)

    def post(self, claimed: ClaimedJob, outcome: Outcome) -> None:
        """Queue one outcome for writing."""
        if self._flusher is None or self._flusher.done():
            self._closing = False
            self._flush_tasks = [
                asyncio.create_task(
                    self._flush_loop(self._generation), name=f"caravel-acknowledger-{n}"
                )
                for n in range(self._writers)
            ]
            self._flusher = asyncio.gather(*self._flush_tasks)
        self._pending.append((claimed, outcome))
        self._wake.set()

    def has_room(self) -> bool:
        return len(self._pending) < self._max_pending

    async def room(self) -> None:
        """Wait until the queue of unwritten outcomes is below its bound (backpressure when the
        database falls behind the handlers)."""
        while not self.has_room() and self._flusher is not None and not self._flusher.done():
            self._drained.clear()
            await self._drained.wait()

    async def close(self) -> None:
        """Write everything still queued, then stop the flusher."""
        self._closing = True
        self._wake.set()
        flusher, self._flusher = self._flusher, None
        if flusher is not None:
            with contextlib.suppress(Exception):  # already reported through on_error
                await flusher

    async def abort(self) -> None:
        """Stop the flusher at once, dropping whatever is queued (their jobs run again after
        their leases expire)."""
        flusher, self._flusher = self._flusher, None
        tasks, self._flush_tasks = self._flush_tasks, []
        self._pending.clear()
        self._generation += 1
        self._wake.set()
        await cancel_and_wait(tasks)
        if flusher is not None:
            # Not awaited: a flush task left running after the stop's patience would hold the
            # stop up again. What it ends with is taken when it ends.
            flusher.add_done_callback(_taken)

    async def _flush_loop(self, generation: int) -> None:
        failures = 0  # writes failed in a row by an outage
        while generation == self._generation:
            await self._wake.wait()
            self._wake.clear()
            while self._pending and generation == self._generation:
                batch = self._pending[: self._max_batch]
                del self._pending[: self._max_batch]
                self._drained.set()
                try:
                    held = await self._write(batch)
                except Exception as exc:
                    if await self._retried(exc, failures, batch):
                        failures += 1
                        continue
                    self._pending.clear()
                    self._drained.set()
                    self._on_error(exc)
                    return
                failures = 0
                if self._outage is not None:
                    self._outage.ended()
                self._written(batch, held)
            if self._closing:
                return

    async def _retried(
        self, exc: Exception, failures: int, batch: list[tuple[ClaimedJob, Outcome]]
    ) -> bool:
        """Whether ``batch``, whose write failed with ``exc``, is to be written again: when the
        database is unreachable and the outage window is not used up, it goes back to the front
        of the queue after the pause."""
        if self._outage is None or not is_outage(exc):
            return False
        self._pending[:0] = batch
        try:
            await self._outage.wait(exc, failures)
        except StoreError:  # the window is used up: the worker stops
            return False
        return True

    async def _write(self, batch: list[tuple[ClaimedJob, Outcome]]) -> set[UUID]:
        # Each outcome is its own acknowledgement (it has the fields Leases.record reads). One
        # the handler's transaction committed already is not written again: it held.
        acks = [outcome for _, outcome in batch if not outcome.committed]
        held = await self._leases.record(acks) if acks else set()
        if len(acks) < len(batch):
            held.update(outcome.lease.job_id for _, outcome in batch if outcome.committed)
        return held


def _taken(flusher: asyncio.Future[list[None]]) -> None:
    """An aborted flusher's end, taken so asyncio does not log it as never retrieved."""
    if not flusher.cancelled():
        flusher.exception()
