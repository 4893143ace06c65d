"""Pruning a queue under a :class:`~caravel.retention.Retention`: bounded batches, each its own
short transaction, until a batch finds less than a full batch to remove. What the deliberate
``caravel jobs prune``, :meth:`DatabaseQueue.prune <caravel.DatabaseQueue.prune>` and the
workers' scheduled pruner (:mod:`caravel.worker.pruner`) all run."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from caravel.clock import Clock, duration_ms
from caravel.errors import ValidationError
from caravel.retention import DEFAULT_PRUNE_PAUSE, MAX_PRUNE_BATCH, Retention
from caravel.store.protocol import Store
from caravel.store.pruning import PruneBatch, PruneRequest
from caravel.validation import check_duration, check_int, check_queue_name

__all__ = ["check_prune", "prune", "prune_request"]


def prune_request(
    retention: Retention, now: int, *, limit: int, queue: str | None, dry_run: bool = False
) -> PruneRequest:
    """The store's request for one batch at ``now``: each age turned into a cutoff."""

    def before(age: timedelta | None) -> int | None:
        return None if age is None else now - duration_ms(age)

    return PruneRequest(
        now=now,
        limit=limit,
        queue=queue,
        completed_before=before(retention.completed),
        cancelled_before=before(retention.cancelled),
        dead_letter_before=before(retention.dead_letter),
        tombstones_before=before(retention.keys),
        dry_run=dry_run,
    )


def check_prune(retention: object, queue: object, limit: object, pause: object) -> None:
    """The arguments' rules, checked before anything is read or written."""
    check_duration("pause", pause, timedelta(0), timedelta(seconds=10), "must be 0 to 10 seconds")
    if not isinstance(retention, Retention):
        raise ValidationError("retention", "must be a caravel.Retention")
    if queue is not None:
        check_queue_name(queue)
    check_int("limit", limit, 1, MAX_PRUNE_BATCH)


async def prune(
    store: Store,
    clock: Clock,
    retention: Retention,
    *,
    queue: str | None,
    limit: int,
    dry_run: bool = False,
    pause: timedelta = DEFAULT_PRUNE_PAUSE,
) -> PruneBatch:
    """Prune in batches of at most ``limit`` rows until one comes back short (or another pruner
    holds the lock: ``busy`` in the result), ``pause`` apart. Returns the totals. A dry run
    counts everything that would go, in one read.

    The pause is real time, not the queue's clock: it leaves the database to other writers
    (SQLite's busy handler retries a waiting claim every 100 ms or so, and a pruner starting its
    next batch at once would win the lock again each time), which no test clock stands for."""
    if not retention.enabled:
        return PruneBatch()
    if dry_run:
        now = clock.now_ms()
        return await store.job_prune(
            prune_request(retention, now, limit=limit, queue=queue, dry_run=True)
        )
    deleted = tombstoned = expired = 0
    while True:
        request = prune_request(retention, clock.now_ms(), limit=limit, queue=queue)
        batch = await store.job_prune(request)
        deleted += batch.deleted
        tombstoned += batch.tombstoned
        expired += batch.tombstones_deleted
        if batch.busy or batch.total < limit:
            return PruneBatch(deleted, tombstoned, expired, busy=batch.busy)
        if pause:
            await asyncio.sleep(pause.total_seconds())
