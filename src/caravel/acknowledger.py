"""Recording outcomes in batches.

Handlers finish one by one; their outcomes are queued and written by a single flusher. While one
write is in flight the next outcomes accumulate, so under load many acknowledgements share one
statement and one commit, and when idle an outcome is written at once. Every row is still guarded
by its own lease token: a stale lease in a batch changes nothing and is reported back to its job
alone. A crash that loses queued acknowledgements only means those jobs run again once their
leases expire, which at-least-once delivery already allows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

from caravel.execution import Outcome
from caravel.jobs import ClaimedJob
from caravel.queue import DatabaseQueue
from caravel.store.api import FailedAttempt

__all__ = ["Acknowledger"]

logger = logging.getLogger("caravel.worker")


@dataclass(slots=True)
class _Pending:
    claimed: ClaimedJob
    outcome: Outcome
    done: asyncio.Future[bool] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class Acknowledger:
    """Batches complete/fail writes for one worker."""

    def __init__(self, queue: DatabaseQueue, *, max_batch: int = 500) -> None:
        self._queue = queue
        self._max_batch = max_batch
        self._pending: list[_Pending] = []
        self._wake = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None
        self._closing = False
        self.lost = 0

    async def submit(self, claimed: ClaimedJob, outcome: Outcome) -> bool:
        """Queue one outcome and wait until it is written. Returns false when the lease was no
        longer current (nothing changed). A database failure raises
        :class:`~caravel.errors.StoreError`."""
        if self._flusher is None or self._flusher.done():
            self._closing = False
            self._flusher = asyncio.create_task(self._flush_loop(), name="caravel-acknowledger")
        pending = _Pending(claimed, outcome)
        self._pending.append(pending)
        self._wake.set()
        return await asyncio.shield(pending.done)

    async def close(self) -> None:
        """Write everything still queued, then stop the flusher. A write failure here was
        already reported to the jobs waiting on it."""
        self._closing = True
        self._wake.set()
        flusher, self._flusher = self._flusher, None
        if flusher is None:
            return
        with contextlib.suppress(Exception):  # already delivered to every waiter
            await flusher

    async def abort(self) -> None:
        """Stop the flusher at once, dropping whatever is queued (their jobs run again after
        their leases expire)."""
        flusher, self._flusher = self._flusher, None
        if flusher is not None:
            flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await flusher

    async def _flush_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._closing and not self._pending:
                return
            while self._pending:
                batch = self._pending[: self._max_batch]
                del self._pending[: self._max_batch]
                try:
                    await self._write(batch)
                except BaseException as exc:
                    for item in batch:
                        if not item.done.done():
                            if isinstance(exc, asyncio.CancelledError):
                                item.done.cancel()
                            else:
                                item.done.set_exception(exc)
                    raise

    async def _write(self, batch: list[_Pending]) -> None:
        now = self._queue.clock.now_ms()
        completes = [item.outcome.lease for item in batch if item.outcome.failure is None]
        failures: list[FailedAttempt] = [
            self._queue.failure_for(item.outcome.lease, item.outcome.failure.value, now)
            for item in batch
            if item.outcome.failure is not None
        ]
        held = await self._queue.store.job_complete_many(completes, now)
        held |= await self._queue.store.job_fail_many(failures, now)
        for item in batch:
            ok = item.outcome.lease.job_id in held
            if not ok:
                self.lost += 1
            item.done.set_result(ok)
