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
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from caravel import telemetry
from caravel._failpoints import failpoint
from caravel.clock import duration_ms
from caravel.codec import PayloadDecodeError, decode_payload
from caravel.errors import IdempotencyConflictError, OptionsError, StoreError
from caravel.jobs import EnqueueResult
from caravel.outbox.table import OUTBOX_TABLE, add_outbox, envelope_table
from caravel.queue import DatabaseQueue
from caravel.retry import exponential_backoff
from caravel.store import postgresql, sqlite
from caravel.store.protocol import NewJob
from caravel.store.urls import backend_of

__all__ = ["OutboxRelay"]

logger = logging.getLogger("caravel.outbox")

MAX_BATCH = 1000
#: First delay before an undeliverable envelope is tried again; it doubles up to the maximum.
STUCK_RETRY = timedelta(minutes=1)
STUCK_RETRY_MAX = timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class _Stuck:
    envelope_id: Any
    queue: str
    job_type: str
    reason: str
    attempts: int


def _engine_for(target: AsyncEngine | str | sa.URL) -> AsyncEngine:
    if isinstance(target, AsyncEngine):
        return target
    if backend_of(target) == "postgresql":
        return postgresql.create_engine(target)
    return sqlite.create_engine(target, set_wal=False)


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
        if isinstance(batch_size, bool) or not isinstance(batch_size, int):
            raise OptionsError("batch_size", "must be an integer from 1 to 1000")
        if not (1 <= batch_size <= MAX_BATCH):
            raise OptionsError("batch_size", "must be from 1 to 1000")
        if not isinstance(poll_interval, timedelta) or not (
            timedelta(milliseconds=10) <= poll_interval <= timedelta(hours=1)
        ):
            raise OptionsError("poll_interval", "must be from 10 milliseconds to 1 hour")
        self._owns_engine = not isinstance(app, AsyncEngine)
        self.engine = _engine_for(app)
        self.queue = queue
        self.batch_size = batch_size
        self.poll_interval = poll_interval
        self.table = envelope_table(add_outbox(sa.MetaData(), name=table_name))
        self._stop = asyncio.Event()
        self._last_pass_full = False
        self.dispatched = 0
        self.stuck = 0

    async def close(self) -> None:
        """Release the application engine if the relay created it."""
        if self._owns_engine:
            await self.engine.dispose()

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

    @asynccontextmanager
    async def _app(self, operation: str) -> AsyncIterator[AsyncConnection]:
        try:
            async with self.engine.begin() as conn:
                yield conn
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(operation) from exc

    async def run_once(self) -> int:
        """One pass: returns how many intents were dispatched."""
        now = self.queue.clock.now_ms()
        t = self.table
        pending = (
            sa.select(t)
            .where(t.c.dispatched_at.is_(None), sa.or_(t.c.retry_at.is_(None), t.c.retry_at <= now))
            .order_by(t.c.staged_at, t.c.id)
            .limit(self.batch_size)
        )
        waiting = sa.select(sa.func.count()).select_from(t).where(t.c.dispatched_at.is_(None))
        async with self._app("outbox_read") as conn:
            rows = (await conn.execute(pending)).all()
            backlog = int((await conn.execute(waiting)).scalar_one())
        self._last_pass_full = len(rows) >= self.batch_size
        if not rows:
            telemetry.record_outbox_pending(t.name, backlog)
            return 0
        ready: list[tuple[Any, NewJob]] = []
        stuck: list[_Stuck] = []
        for row in rows:
            reason = self._undeliverable(row)
            if reason is not None:
                stuck.append(_Stuck(row.id, row.queue, row.job_type, reason, row.relay_attempts))
                continue
            ready.append((row, self._job_for(row, now)))
        with telemetry.relay_span(len(rows)):
            delivered = await self._enqueue(ready, stuck)
            failpoint("relay_after_enqueue")
            await self._record(delivered, stuck)
        by_id = {row.id: row for row in rows}
        for envelope_id, _ in delivered:
            telemetry.record_dispatched(by_id[envelope_id].queue, by_id[envelope_id].job_type)
        for item in stuck:
            telemetry.record_undeliverable(item.queue, item.reason)
        telemetry.record_outbox_pending(t.name, backlog - len(delivered))
        self.dispatched += len(delivered)
        return len(delivered)

    def _undeliverable(self, row: Any) -> str | None:
        entry = self.queue.registry.get(row.job_type)
        if entry is None:
            return "UnknownJobType"
        try:
            decode_payload(entry.adapter, row.payload)
        except PayloadDecodeError:
            return "InvalidPayload"
        return None

    def _job_for(self, row: Any, now: int) -> NewJob:
        return NewJob(
            id=row.id,
            queue=row.queue,
            job_type=row.job_type,
            tenant_id=row.tenant_id,
            idempotency_key=row.idempotency_key,
            payload=row.payload,
            max_attempts=row.max_attempts or self.queue.options.max_attempts,
            due_at=row.due_at if row.due_at is not None else now,
            created_at=now,
            trace_context=row.trace_context,
        )

    async def _enqueue(
        self, ready: Sequence[tuple[Any, NewJob]], stuck: list[_Stuck]
    ) -> list[tuple[Any, EnqueueResult]]:
        if not ready:
            return []
        try:
            results = await self.queue.insert_prepared([job for _, job in ready])
            return [(row.id, result) for (row, _), result in zip(ready, results, strict=True)]
        except IdempotencyConflictError:
            pass  # find the conflicting envelope(s) one by one; the rest still go through
        delivered: list[tuple[Any, EnqueueResult]] = []
        for row, job in ready:
            try:
                (result,) = await self.queue.insert_prepared([job])
            except IdempotencyConflictError:
                stuck.append(
                    _Stuck(
                        row.id, row.queue, row.job_type, "IdempotencyConflict", row.relay_attempts
                    )
                )
                continue
            delivered.append((row.id, result))
        return delivered

    async def _record(
        self, delivered: Sequence[tuple[Any, EnqueueResult]], stuck: Sequence[_Stuck]
    ) -> None:
        now = self.queue.clock.now_ms()
        t = self.table
        async with self._app("outbox_mark") as conn:
            if delivered:
                await conn.execute(
                    sa.update(t)
                    .where(t.c.id == sa.bindparam("b_id"), t.c.dispatched_at.is_(None))
                    .values(
                        dispatched_at=now,
                        queue_job_id=sa.bindparam("b_job"),
                        relay_failure=None,
                        retry_at=None,
                    ),
                    [{"b_id": envelope_id, "b_job": r.job_id} for envelope_id, r in delivered],
                )
            for item in stuck:
                delay = exponential_backoff(STUCK_RETRY, STUCK_RETRY_MAX, item.attempts + 1)
                await conn.execute(
                    sa.update(t)
                    .where(t.c.id == item.envelope_id, t.c.dispatched_at.is_(None))
                    .values(
                        relay_failure=item.reason,
                        relay_attempts=t.c.relay_attempts + 1,
                        retry_at=now + duration_ms(delay),
                    )
                )
        for item in stuck:
            self.stuck += 1
            logger.warning(
                "outbox envelope cannot be delivered; it stays pending",
                extra={
                    "outbox_id": str(item.envelope_id),
                    "queue": item.queue,
                    "job_type": item.job_type,
                    "category": item.reason,
                },
            )
