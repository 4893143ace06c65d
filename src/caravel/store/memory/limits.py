"""The in-memory store's concurrency and rate limits, with the rules of
:mod:`caravel.store.limited`: a limit replaces the queue's previous one of its kind, a clear
removes it, and a limited claim counts the running jobs (and, under a rate, the weights started
within the window) and picks what the limits leave (:func:`limited_pick`) under the tables'
lock, which makes it exact as the SQL stores' turns do."""

from __future__ import annotations

import dataclasses
import heapq
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from caravel.errors import ValidationError
from caravel.flow.concurrency import ConcurrencyLimit
from caravel.flow.rate import RateLimit
from caravel.flow.window import Candidate, Caps, fit
from caravel.jobs import JobState
from caravel.store.claims import KEY_SCAN
from caravel.store.limited import check_rate_fits, checked_limit, stored_fields
from caravel.store.memory.reads import MemoryReader
from caravel.store.memory.tables import JobRow, Tables, partition_of
from caravel.store.protocol import LimitKind, QueueLimit
from caravel.validation import check_queue_name

__all__ = ["MemoryLimits", "limited_pick", "log_starts"]

RUNNING = JobState.RUNNING.value
WAITING = (JobState.READY.value, JobState.RUNNING.value)
_CONCURRENCY = ("concurrency", "per_key")
_RATE = ("rate", "rate_per_key", "rate_period_ms")

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
    if stored is not None and stored.rate_period_ms is not None:
        return _rated_pick(tables, stored, now - stored.rate_period_ms, limit, sources, due)
    running = _running(tables, queue, now) if stored is not None else []
    if stored is not None and stored.concurrency is not None:
        limit = min(limit, stored.concurrency - len(running))
        if limit <= 0:
            return []
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


def _rated_pick(
    tables: Tables,
    stored: QueueLimit,
    since: int,
    limit: int,
    sources: Sequence[tuple[str, _Order]],
    due: Callable[[str], list[JobRow]],
) -> list[JobRow]:
    """``limited._claim_rated`` in Python: prune the window, count, and :func:`fit`."""
    log = [start for start in tables.starts.get(stored.queue, []) if start[0] > since]
    tables.starts[stored.queue] = log
    started: Counter[str] = Counter()
    for _, key, weight in log:
        started[key] += weight
    now = since + (stored.rate_period_ms or 0)
    running = Counter(partition_of(row) for row in _running(tables, stored.queue, now))
    candidates = [
        Candidate(id(row), partition_of(row), row.weight or 1)
        for state, order in sources
        for row in heapq.nsmallest(KEY_SCAN, due(state), key=order)
    ]
    rows = {id(row): row for state, _ in sources for row in due(state)}
    caps = Caps(stored.concurrency, stored.per_key, stored.rate, stored.rate_per_key)
    return [rows[job.id] for job in fit(candidates, limit, caps, running, started)]


def log_starts(tables: Tables, queue: str, now: int, claimed: Sequence[JobRow]) -> None:
    """Log a start for each of ``claimed`` now running, when ``queue`` has a rate."""
    stored = tables.limits.get(queue)
    if stored is None or stored.rate_period_ms is None:
        return
    log = tables.starts.setdefault(queue, [])
    log.extend((now, partition_of(row), row.weight or 1) for row in claimed if row.state == RUNNING)


class MemoryLimits(MemoryReader):
    """``queue_limit_set`` and ``queue_limit_clear`` over the tables."""

    async def queue_limit_set(self, limit: ConcurrencyLimit | RateLimit, now: int) -> QueueLimit:
        limit = checked_limit(limit)
        with self._locked("queue_limit_set") as tables:
            if isinstance(limit, RateLimit):
                weights = [
                    row.weight or 1 for row in tables.live_rows(limit.queue) if row.state in WAITING
                ]
                check_rate_fits(limit, max(weights, default=None))
            before = tables.limits.get(limit.queue) or QueueLimit(limit.queue, None, None, now)
            fields: dict[str, Any] = {**stored_fields(limit), "updated_at": now}
            stored = dataclasses.replace(before, **fields)
            tables.limits[limit.queue] = stored
        return stored

    async def queue_limit_clear(self, queue: str, now: int, kind: LimitKind = "all") -> bool:
        check_queue_name(queue)
        if kind not in ("all", "concurrency", "rate"):
            raise ValidationError("kind", "must be 'all', 'concurrency' or 'rate'")
        with self._locked("queue_limit_clear") as tables:
            before = tables.limits.get(queue)
            if before is None:
                return False
            cleared = _RATE + _CONCURRENCY if kind == "all" else _fields(kind)
            if all(getattr(before, name) is None for name in cleared):
                return False
            emptied: dict[str, Any] = {**dict.fromkeys(cleared), "updated_at": now}
            after = dataclasses.replace(before, **emptied)
            if kind != "concurrency":
                tables.starts.pop(queue, None)
            if all(getattr(after, name) is None for name in _RATE + _CONCURRENCY):
                del tables.limits[queue]
            else:
                tables.limits[queue] = after
            return True


def _fields(kind: LimitKind) -> tuple[str, ...]:
    return _CONCURRENCY if kind == "concurrency" else _RATE
