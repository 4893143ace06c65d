"""What a worker knows of its queues' concurrency limits, fairness and rate limits: read from
the store when it starts (after storing those its registry declares), again at every read of the
paused set (each ``poll_interval``, and at once when PostgreSQL pushes a change on the queues'
channel), so a change reaches running workers without a restart.

A fetcher sends a limited claim only for a queue it knows to be limited; the claim itself then
reads the stored limits in its own transaction, so a limit lowered, raised or removed since the
last read is kept exactly by the next claim. A limit set on a queue the worker believed
unlimited holds at once too: until the worker's next read (at most one ``poll_interval``
later), its plain claims take nothing from a queue with a limits row
(:func:`caravel.store.claims.claim`)."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from caravel.flow.concurrency import ConcurrencyLimit
from caravel.flow.rate import RateLimit
from caravel.store.protocol import QueueLimit, Store

__all__ = ["LimitedQueues"]

logger = logging.getLogger("caravel.worker")


class LimitedQueues:
    """The concurrency limits of a worker's queues, as last read."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._limits: dict[str, QueueLimit] = {}

    def __contains__(self, queue: object) -> bool:
        return queue in self._limits

    def get(self, queue: str) -> QueueLimit | None:
        """``queue``'s limits as last read, or ``None``."""
        return self._limits.get(queue)

    async def refresh(self, queues: Iterable[str]) -> frozenset[str]:
        """Read the limits of ``queues`` again; returns the queues whose limits changed."""
        wanted = frozenset(queues)
        read = {q.queue: q for q in await self._store.queue_limit_list() if q.queue in wanted}
        changed = {
            name
            for name in read.keys() | self._limits.keys()
            if _caps(read.get(name)) != _caps(self._limits.get(name))
        }
        for name in sorted(changed):
            limit = read.get(name)
            if limit is None:
                logger.info("queue limit removed", extra={"queue": name})
            else:
                logger.info(
                    "queue limit read",
                    extra={
                        "queue": name,
                        "concurrency": limit.concurrency,
                        "per_key": limit.per_key,
                        "rate": limit.rate,
                        "rate_per_key": limit.rate_per_key,
                        "rate_period_ms": limit.rate_period_ms,
                        "fair": limit.fair,
                    },
                )
        self._limits = read
        return frozenset(changed)

    async def declare(self, limits: Iterable[ConcurrencyLimit | RateLimit], now: int) -> None:
        """Store the limits the registry declares (:meth:`JobRegistry.limit
        <caravel.JobRegistry.limit>`), replacing what the database held for their queues."""
        for limit in limits:
            await self._store.queue_limit_set(limit, now)

    async def limited_now(self, queue: str) -> bool:
        """Whether ``queue`` has a limit, read from the store now (one step of the worker)."""
        return any(q.queue == queue for q in await self._store.queue_limit_list())


def _caps(limit: QueueLimit | None) -> tuple[object, ...] | None:
    if limit is None:
        return None
    return (
        limit.concurrency,
        limit.per_key,
        limit.rate,
        limit.rate_per_key,
        limit.rate_period_ms,
        limit.fair,
        sorted(limit.weights.items()),
    )
