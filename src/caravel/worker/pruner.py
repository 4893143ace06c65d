"""The workers' scheduled pruner: every ``prune_interval`` (on the queue's clock),
prune the queue under the worker's :class:`~caravel.retention.Retention` in bounded batches with
a pause between them (150 ms, real time), so claims and acknowledgements get the database in
between.

Every worker with a retention may run one; only one prunes at a time. On PostgreSQL each batch's
transaction takes an advisory lock and a worker that cannot get it skips this round. On SQLite
the one writer serializes batches: two pruners alternate, batch by batch, and never overlap.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from caravel import prune
from caravel.clock import Clock
from caravel.errors import CaravelError
from caravel.retention import DEFAULT_PRUNE_BATCH, Retention
from caravel.store.protocol import Store
from caravel.store.pruning import PruneBatch

__all__ = ["Pruner"]

logger = logging.getLogger("caravel.worker")


class Pruner:
    """Prunes on ``clock`` every ``interval`` (the first round one interval after start)."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        retention: Retention,
        interval: timedelta,
        *,
        limit: int = DEFAULT_PRUNE_BATCH,
    ) -> None:
        self._store = store
        self._clock = clock
        self._retention = retention
        self._every = interval.total_seconds()
        self._limit = limit

    async def run(self) -> None:
        """A round every interval. A failed round is logged, not fatal: the next one retries."""
        while True:
            await self._clock.sleep(self._every)
            try:
                await self.run_once()
            except CaravelError as exc:
                logger.warning(
                    "prune round failed: %s",
                    type(exc).__name__,
                    extra={"error_type": type(exc).__name__},
                )

    async def run_once(self) -> PruneBatch:
        """One round now: batches until one comes back short, or another pruner is busy."""
        done = await prune.prune(
            self._store,
            self._clock,
            self._retention,
            queue=None,
            limit=self._limit,
        )
        if done.total:
            logger.info(
                "pruned %d jobs (%d tombstones kept, %d expired tombstones deleted)",
                done.deleted + done.tombstoned,
                done.tombstoned,
                done.tombstones_deleted,
            )
        return done
