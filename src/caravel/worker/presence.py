"""The worker's presence in the database: its row in the worker registry (registration,
heartbeats, the normal shutdown) and, when asked for, the queue-depth gauges it publishes."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from uuid import UUID

from caravel import gauges
from caravel.clock import Clock
from caravel.errors import CaravelError
from caravel.limits import MAX_HOST_LENGTH
from caravel.store.protocol import Heartbeat, QueueCounts, QueueLimitUsage, Store, WorkerRecord

__all__ = ["Presence", "QueueGaugeCollector", "gauge_values", "limit_values"]

logger = logging.getLogger("caravel.worker")

COUNTED_STATES = ("ready", "delayed", "held", "running", "expired", "dead_letter", "completed")


class Presence:
    """Registers a worker process, keeps its heartbeat fresh and records its shutdown.
    ``in_flight`` tells how many handlers run right now."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        *,
        worker_id: UUID,
        concurrency: int,
        heartbeat_interval: timedelta,
        in_flight: Callable[[], int],
    ) -> None:
        self._store = store
        self._clock = clock
        self.worker_id = worker_id
        self._concurrency = concurrency
        self._every = heartbeat_interval.total_seconds()
        self._in_flight = in_flight

    async def register(self, queues: Sequence[str]) -> None:
        now = self._clock.now_ms()
        await self._store.worker_register(
            WorkerRecord(
                id=self.worker_id,
                host=socket.gethostname()[:MAX_HOST_LENGTH],
                pid=os.getpid(),
                queues=tuple(queues),
                concurrency=self._concurrency,
                started_at=now,
                heartbeat_at=now,
                in_flight=0,
            )
        )

    async def run(self) -> None:
        """A heartbeat every interval. A failed heartbeat is logged, not fatal: the claim path
        notices a broken database on its own."""
        while True:
            await self._clock.sleep(self._every)
            try:
                await self.run_once()
            except CaravelError:
                logger.warning("worker heartbeat could not be written")

    async def run_once(self) -> None:
        """One heartbeat, now."""
        beat = Heartbeat(self.worker_id, self._clock.now_ms(), self._in_flight())
        await self._store.worker_heartbeat(beat)

    async def deregister(self) -> None:
        """Record a normal shutdown (logged, not raised, when it cannot be written)."""
        try:
            beat = Heartbeat(self.worker_id, self._clock.now_ms(), 0, stopped=True)
            await self._store.worker_heartbeat(beat)
        except CaravelError:
            logger.warning("worker could not record its shutdown")


def gauge_values(
    counts: Iterable[QueueCounts], now_ms: int
) -> tuple[dict[str, dict[str, int]], dict[str, float]]:
    """Queue counts as the gauges take them: per queue, the count in each state, and how long
    the oldest due job has waited, in seconds."""
    depths: dict[str, dict[str, int]] = {}
    ages: dict[str, float] = {}
    for c in counts:
        depths[c.queue] = {state: getattr(c, state) for state in COUNTED_STATES}
        oldest = c.oldest_ready_due_ms
        ages[c.queue] = 0.0 if oldest is None else (now_ms - oldest) / 1000
    return depths, ages


def limit_values(usage: Iterable[QueueLimitUsage]) -> dict[str, gauges.LimitSnapshot]:
    """Limited queues as the gauges take them."""
    return {
        u.limit.queue: gauges.LimitSnapshot(
            u.limit.concurrency,
            u.limit.per_key,
            u.running,
            u.waiting,
            u.limit.rate,
            u.limit.rate_per_key,
            u.rate_used,
        )
        for u in usage
    }


class QueueGaugeCollector:
    """Reads the queue counts every ``interval`` and publishes them as the ``caravel.queue.*``
    gauges (opt-in, one process per deployment)."""

    def __init__(self, store: Store, clock: Clock, interval: timedelta) -> None:
        self._store = store
        self._clock = clock
        self._every = interval.total_seconds()
        self._gauges = gauges.queue_gauges()

    async def run(self) -> None:
        while True:
            try:
                await self.run_once()
            except CaravelError:
                logger.warning("queue metrics could not be read; trying again")
            await self._clock.sleep(self._every)

    async def run_once(self) -> None:
        now = self._clock.now_ms()
        counts = await self._store.queue_counts(None, now)
        self._gauges.update(*gauge_values(counts, now))
        usage = await self._store.queue_limit_usage(None, now, keys=0)
        self._gauges.update_limits(limit_values(usage))
