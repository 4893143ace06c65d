"""The in-memory store's concurrency limits, with the rules of :mod:`caravel.store.limited`:
a limit replaces the queue's previous one, a clear removes it, and a limited claim counts the
running jobs and picks what the limits leave (:func:`limited_pick`) under the tables' lock, which
makes it exact as the SQL stores' turns do."""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Sequence

from caravel.flow.concurrency import ConcurrencyLimit
from caravel.jobs import JobState
from caravel.store.claims import KEY_SCAN
from caravel.store.limited import checked_limit
from caravel.store.memory.reads import MemoryReader
from caravel.store.memory.tables import JobRow, Tables, partition_of
from caravel.store.protocol import QueueLimit
from caravel.validation import check_queue_name

__all__ = ["MemoryLimits", "limited_pick"]

RUNNING = JobState.RUNNING.value

_Order = Callable[[JobRow], tuple[int, int]]


def _running(tables: Tables, queue: str, now: int) -> list[JobRow]:
    return [
        row
        for row in tables.live_rows(queue)
        if row.state == RUNNING and row.available_at is not None and row.available_at > now
    ]


def limited_pick(
    tables: Tables,
    queue: str,
    now: int,
    limit: int,
    sources: Sequence[tuple[str, _Order]],
    due: Callable[[str], list[JobRow]],
) -> list[JobRow]:
    """The rows a limited claim of ``queue`` takes at ``now``: at most ``limit`` and what the
    stored limits leave (``claims.claim_per_key`` and ``limited._claim_limited`` in Python).
    ``due(state)`` lists the queue's due rows in ``state``."""
    stored = tables.limits.get(queue)
    running = _running(tables, queue, now) if stored is not None else []
    if stored is not None and stored.concurrency is not None:
        limit = min(limit, stored.concurrency - len(running))
        if limit <= 0:
            return []
    if stored is not None and stored.fair:
        return _fair_pick(stored, running, limit, sources, due)
    if stored is None or stored.per_key is None:
        picked: list[JobRow] = []
        for state, order in sources:
            picked.extend(heapq.nsmallest(limit, due(state), key=order))
        return picked[:limit]
    per_key = stored.per_key
    counts = Counter(partition_of(row) for row in running)
    chosen: list[JobRow] = []
    for state, order in sources:
        for row in heapq.nsmallest(KEY_SCAN, due(state), key=order):
            key = partition_of(row)
            counts[key] += 1  # numbered within its key, running jobs first
            if counts[key] <= per_key and len(chosen) < limit:
                chosen.append(row)
    return chosen


def _fair_pick(
    stored: QueueLimit,
    running: list[JobRow],
    limit: int,
    sources: Sequence[tuple[str, _Order]],
    due: Callable[[str], list[JobRow]],
) -> list[JobRow]:
    """``claims.claim_fair`` in Python: expired leases first, then the first ``limit`` ready
    jobs of each of the first :data:`KEY_SCAN` keys, by (round, claim order, key), a key of
    weight ``w`` having ``w`` jobs per round, its running jobs counting into its rounds; within
    ``per_key`` counting running jobs."""
    counts = Counter(partition_of(row) for row in running)
    candidates: list[tuple[int, int, tuple[int, int], str, JobRow]] = []
    for part, (state, order) in enumerate(sources):
        if state == RUNNING:
            scan = KEY_SCAN if stored.per_key is not None else limit
            rows = heapq.nsmallest(scan, due(state), key=order)
            candidates.extend((part, 0, order(row), partition_of(row), row) for row in rows)
            continue
        by_key: dict[str, list[JobRow]] = {}
        for row in due(state):
            by_key.setdefault(partition_of(row), []).append(row)
        for key in sorted(by_key)[:KEY_SCAN]:
            weight = stored.weights.get(key, 1)
            firsts = heapq.nsmallest(limit, by_key[key], key=order)
            for n, row in enumerate(firsts):
                candidates.append((part, (counts[key] + n) // weight, order(row), key, row))
    candidates.sort(key=lambda c: (c[0], c[1], c[2][0], c[3], c[2][1]))
    if stored.per_key is None:
        return [c[4] for c in candidates[:limit]]
    numbered: dict[int, int] = {}
    # Numbered within the key by (part, claim order), as ``in_key`` in SQL.
    for _, _, _, key, row in sorted(candidates, key=lambda c: (c[0], c[2])):
        counts[key] += 1
        numbered[id(row)] = counts[key]
    return [c[4] for c in candidates if numbered[id(c[4])] <= stored.per_key][:limit]


class MemoryLimits(MemoryReader):
    """``queue_limit_set`` and ``queue_limit_clear`` over the tables."""

    async def queue_limit_set(self, limit: ConcurrencyLimit, now: int) -> QueueLimit:
        limit = checked_limit(limit)
        stored = QueueLimit(
            limit.queue, limit.concurrency, limit.per_key, now, limit.fair, dict(limit.weights)
        )
        with self._locked("queue_limit_set") as tables:
            tables.limits[limit.queue] = stored
        return stored

    async def queue_limit_clear(self, queue: str, now: int) -> bool:
        check_queue_name(queue)
        with self._locked("queue_limit_clear") as tables:
            return tables.limits.pop(queue, None) is not None
