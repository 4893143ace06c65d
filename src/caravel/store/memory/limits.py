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
from caravel.flow.fairness import comes_after, fair_order, next_cursor, share
from caravel.flow.rate import RateLimit
from caravel.flow.window import Candidate, Caps, fit, stale_before, started_weights, window_clock
from caravel.jobs import JobState
from caravel.store.claims import KEY_SCAN
from caravel.store.limited import check_rate_fits, checked_limit, stored_fields
from caravel.store.memory.reads import MemoryReader
from caravel.store.memory.tables import JobRow, Tables, partition_of
from caravel.store.protocol import LimitKind, QueueLimit
from caravel.validation import check_queue_name

__all__ = ["MemoryLimits", "claim_clock", "limited_pick", "log_starts"]

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
    *,
    window: int,
) -> list[JobRow]:
    """The rows a limited claim of ``queue`` takes at ``now``: at most ``limit`` and what the
    stored limits leave (``claims.claim_per_key`` and ``limited._claim_limited`` in Python).
    ``due(state)`` lists the queue's due rows in ``state``; a rate's window ends at ``window``
    (:func:`claim_clock`)."""
    stored = tables.limits.get(queue)
    if stored is not None and stored.rate_period_ms is not None:
        since = window - stored.rate_period_ms
        return _rated_pick(tables, stored, now, since, limit, sources, due)
    running = _running(tables, queue, now) if stored is not None else []
    if stored is not None and stored.concurrency is not None:
        limit = min(limit, stored.concurrency - len(running))
        if limit <= 0:
            return []
    if stored is not None and stored.fair:
        return _fair_pick(tables, stored, running, limit, sources, due)
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
    now: int,
    since: int,
    limit: int,
    sources: Sequence[tuple[str, _Order]],
    due: Callable[[str], list[JobRow]],
) -> list[JobRow]:
    """``limited._claim_rated`` in Python: prune the window, count, put a fair queue's due jobs
    in fair order, and :func:`fit`."""
    log = tables.starts.get(stored.queue, [])
    times = [at for at, _, _ in log]
    stale = stale_before(
        max(times, default=None), stored.rate_period_ms or 0, min(times, default=None)
    )
    if stale is not None:
        log = tables.starts[stored.queue] = [start for start in log if start[0] > stale]
    started: Counter[str] = Counter()
    for at, key, weight in log:
        if at > since:
            started[key] += weight
    running = Counter(partition_of(row) for row in _running(tables, stored.queue, now))
    found = [
        (state == RUNNING, row)
        for state, order in sources
        for row in heapq.nsmallest(KEY_SCAN, due(state), key=order)
    ]
    if stored.fair:
        keyed = [(expired, partition_of(row)) for expired, row in found]
        cursor = tables.fair_cursors.get(stored.queue)
        found = [found[at] for at in fair_order(keyed, stored.weights, running, cursor)]
    candidates = [Candidate(id(row), partition_of(row), row.weight or 1) for _, row in found]
    rows = {id(row): row for state, _ in sources for row in due(state)}
    caps = Caps(stored.concurrency, stored.per_key, stored.rate, stored.rate_per_key)
    return [rows[job.id] for job in fit(candidates, limit, caps, running, started)]


def claim_clock(tables: Tables, queue: str, now: int) -> int:
    """The time a limited claim of ``queue`` at ``now`` runs at: under a rate, never earlier
    than the latest logged start (:func:`~caravel.flow.window.window_clock`)."""
    stored = tables.limits.get(queue)
    if stored is None or stored.rate_period_ms is None:
        return now
    return window_clock(now, max((at for at, _, _ in tables.starts.get(queue, [])), default=None))


def log_starts(tables: Tables, queue: str, now: int, claimed: Sequence[JobRow]) -> None:
    """Log a start for each of ``claimed`` now running, when ``queue`` has a rate, and move a
    fair queue's cursor past the keys served (:func:`~caravel.flow.fairness.next_cursor`)."""
    stored = tables.limits.get(queue)
    if stored is not None and stored.fair:
        served = (partition_of(row) for row in claimed if row.state == RUNNING)
        moved = next_cursor(tables.fair_cursors.get(queue), served)
        if moved is not None:
            tables.fair_cursors[queue] = moved
    if stored is None or stored.rate_period_ms is None:
        return
    log = tables.starts.setdefault(queue, [])
    started = ((partition_of(row), row.weight or 1) for row in claimed if row.state == RUNNING)
    log.extend((now, key, weight) for key, weight in started_weights(started).items())


def _fair_pick(
    tables: Tables,
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
        listed = sorted(by_key)[:KEY_SCAN]
        each = share(limit, len(listed), stored.weights)
        for key in listed:
            weight = stored.weights.get(key, 1)
            firsts = heapq.nsmallest(each, by_key[key], key=order)
            for n, row in enumerate(firsts):
                candidates.append((part, (counts[key] + n) // weight, order(row), key, row))
    cursor = tables.fair_cursors.get(stored.queue)
    # Expired leases in the order they expired; ready jobs by round, then key from the cursor.
    candidates.sort(
        key=lambda c: (
            (c[0], c[2]) if c[0] == 0 else (1, c[1], not comes_after(c[3], cursor), c[3], c[2])
        )
    )
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
            if isinstance(limit, ConcurrencyLimit):
                fields["weights"] = dict(limit.weights)
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
            kinds: tuple[LimitKind, ...] = ("concurrency", "rate") if kind == "all" else (kind,)
            if not any(_holds(before, held) for held in kinds):
                return False
            emptied: dict[str, Any] = {"updated_at": now}
            for held in kinds:
                emptied.update(_emptied(held))
            after = dataclasses.replace(before, **emptied)
            if kind != "concurrency":
                tables.starts.pop(queue, None)
            if not any(_holds(after, held) for held in ("concurrency", "rate")):
                del tables.limits[queue]
                tables.fair_cursors.pop(queue, None)
            else:
                tables.limits[queue] = after
            return True


def _holds(limit: QueueLimit, kind: LimitKind) -> bool:
    """Whether ``limit`` holds limits of ``kind`` (``concurrency``: caps or fairness)."""
    if kind == "rate":
        return limit.rate_period_ms is not None
    return limit.concurrency is not None or limit.per_key is not None or limit.fair


def _emptied(kind: LimitKind) -> dict[str, Any]:
    """The fields that clearing ``kind`` sets (a concurrency limit's fairness and weights go
    with its caps)."""
    if kind == "rate":
        return dict.fromkeys(_RATE)
    return {**dict.fromkeys(_CONCURRENCY), "fair": False, "weights": {}}
