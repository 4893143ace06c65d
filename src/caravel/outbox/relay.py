"""The relay: deliver committed outbox intents to the queue.

Each pass reads the oldest pending envelopes (by staging time, so an application transaction that
commits late is picked up on a later pass rather than skipped), checks that each still decodes as
its registered type, enqueues them with their original type, payload, queue, tenant, due time and
attempt budget, and then records the queue job id and dispatch time.

The queue job's id is the envelope's id, and the enqueue is idempotent, so a relay that crashes
after enqueueing but before recording the dispatch sends the same intent again on restart and gets
the same job; several relays running at once resolve to one job per intent too.

Envelopes that cannot be delivered (job type no longer registered, a payload that no longer
decodes, or a conflicting queue job under the same key) stay pending with the reason recorded,
are retried with a growing delay, are counted and logged without their payload, and never hold
up the envelopes behind them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from caravel import gauges, telemetry
from caravel._failpoints import failpoint
from caravel.clock import duration_ms
from caravel.codec import PayloadDecodeError, decode_payload
from caravel.errors import IdempotencyConflictError, OptionsError
from caravel.jobs import EnqueueResult
from caravel.outbox import OUTBOX_TABLE
from caravel.outbox.conversion import job_for
from caravel.queue import DatabaseQueue
from caravel.retry import exponential_backoff
from caravel.store import open_outbox_store
from caravel.store.outbox import PendingEnvelope, Undeliverable
from caravel.store.protocol import NewJob
from caravel.validation import check_duration, check_int

if TYPE_CHECKING:
    import sqlalchemy as sa
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["OutboxRelay", "held_back", "warn_stuck"]

logger = logging.getLogger("caravel.outbox")

MAX_BATCH = 1000
#: First delay before an undeliverable envelope is tried again; it doubles up to the maximum.
STUCK_RETRY = timedelta(minutes=1)
STUCK_RETRY_MAX = timedelta(hours=1)


#: An envelope a pass could not deliver, and why.
_Stuck = tuple[PendingEnvelope, str]


class OutboxRelay:
    """Moves committed outbox intents from the application database into the queue.

    ``app`` is the application's async engine (or its URL); ``queue`` is the destination, which may
    live in another database. ``table_name`` must match what :func:`~caravel.outbox.add_outbox`
    created. ``batch_size`` (1 to 1,000, default 100) bounds one pass; ``poll_interval`` (default
    1 s) is the pause between passes that found nothing more to do.
    """

    def __init__(
        self,
        app: AsyncEngine | str | sa.URL,
        queue: DatabaseQueue,
        *,
        table_name: str = OUTBOX_TABLE,
        batch_size: int = 100,
        poll_interval: timedelta = timedelta(seconds=1),
    ) -> None:
        check_int("batch_size", batch_size, 1, MAX_BATCH, error=OptionsError)
        check_duration(
            "poll_interval",
            poll_interval,
            timedelta(milliseconds=10),
            timedelta(hours=1),
            "must be from 10 milliseconds to 1 hour",
            error=OptionsError,
        )
        self._outbox = open_outbox_store(app, table_name)
        self.queue = queue
        self.batch_size = batch_size
        self.poll_interval = poll_interval
        self._stop = asyncio.Event()
        self._last_pass_full = False
        self.dispatched = 0
        self.stuck = 0

    @property
    def engine(self) -> AsyncEngine:
        """The application's engine the relay reads the outbox through."""
        return self._outbox.engine

    @property
    def table(self) -> sa.Table:
        """The outbox table the relay reads."""
        return self._outbox.table

    async def close(self) -> None:
        """Release the application engine if the relay created it."""
        await self._outbox.close()

    def stop(self) -> None:
        """Ask :meth:`run` to return after the current pass."""
        self._stop.set()

    async def run(self) -> None:
        """Relay until :meth:`stop`. Database errors propagate (as
        :class:`~caravel.errors.StoreError`) and stop the relay; a supervised restart picks up
        the undispatched rows."""
        while not self._stop.is_set():
            await self.run_once()
            if self._last_pass_full:
                continue  # a full batch (delivered or not): more may be waiting right behind
            try:
                async with asyncio.timeout(self.poll_interval.total_seconds()):
                    await self._stop.wait()
            except TimeoutError:
                pass

    async def run_once(self) -> int:
        """One pass: returns how many intents were dispatched."""
        now = self.queue.clock.now_ms()
        rows, backlog = await self._outbox.outbox_read_pass(now, self.batch_size)
        self._last_pass_full = len(rows) >= self.batch_size
        table_name = self._outbox.table_name
        if not rows:
            gauges.record_outbox_pending(table_name, backlog)
            return 0
        ready: list[tuple[PendingEnvelope, NewJob]] = []
        stuck: list[_Stuck] = []
        for row in rows:
            reason = self._undeliverable(row)
            if reason is not None:
                stuck.append((row, reason))
                continue
            job = job_for(row, now=now, default_max_attempts=self.queue.options.max_attempts)
            ready.append((row, job))
        with telemetry.relay_span(len(rows)):
            delivered = await self._enqueue(ready, stuck)
            failpoint("relay_after_enqueue")
            await self._record(delivered, stuck)
        for row, _ in delivered:
            telemetry.record_dispatched(row.queue, row.job_type)
        for row, reason in stuck:
            telemetry.record_undeliverable(row.queue, reason)
        gauges.record_outbox_pending(table_name, backlog - len(delivered))
        self.dispatched += len(delivered)
        return len(delivered)

    def _undeliverable(self, row: PendingEnvelope) -> str | None:
        entry = self.queue.registry.get(row.job_type)
        if entry is None:
            return "UnknownJobType"
        try:
            decode_payload(entry.adapter, row.payload)
        except PayloadDecodeError:
            return "InvalidPayload"
        return None

    async def _enqueue(
        self, ready: Sequence[tuple[PendingEnvelope, NewJob]], stuck: list[_Stuck]
    ) -> list[tuple[PendingEnvelope, EnqueueResult]]:
        if not ready:
            return []
        try:
            results = await self.queue.insert_prepared([job for _, job in ready])
            return [(row, result) for (row, _), result in zip(ready, results, strict=True)]
        except IdempotencyConflictError:
            pass  # find the conflicting envelope(s) one by one; the rest still go through
        delivered: list[tuple[PendingEnvelope, EnqueueResult]] = []
        for row, job in ready:
            try:
                (result,) = await self.queue.insert_prepared([job])
            except IdempotencyConflictError:
                stuck.append((row, "IdempotencyConflict"))
                continue
            delivered.append((row, result))
        return delivered

    async def _record(
        self, delivered: Sequence[tuple[PendingEnvelope, EnqueueResult]], stuck: Sequence[_Stuck]
    ) -> None:
        now = self.queue.clock.now_ms()
        await self._outbox.outbox_record_pass(
            {row.id: result.job_id for row, result in delivered}, held_back(stuck, now), now
        )
        self.stuck += len(stuck)
        warn_stuck(logger, "outbox envelope cannot be delivered; it stays pending", stuck)


def held_back(stuck: Sequence[_Stuck], now: int) -> list[Undeliverable]:
    """What a pass records for the envelopes it could not deliver: each reason, and a retry
    time growing with the envelope's attempts (the first retry waits ``STUCK_RETRY``, counting
    the attempt being recorded)."""
    return [
        Undeliverable(
            row.id,
            reason,
            now
            + duration_ms(
                exponential_backoff(STUCK_RETRY, STUCK_RETRY_MAX, row.relay_attempts + 1)
            ),
        )
        for row, reason in stuck
    ]


def warn_stuck(log: logging.Logger, message: str, stuck: Sequence[_Stuck]) -> None:
    """One warning per envelope left pending, with its ids and reason, never its payload."""
    for row, reason in stuck:
        log.warning(
            message,
            extra={
                "outbox_id": str(row.id),
                "queue": row.queue,
                "job_type": row.job_type,
                "category": reason,
            },
        )
