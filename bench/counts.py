"""``python -m bench --only counts``: what ``queue_counts()`` costs as finished history grows.

A few thousand live jobs (ready, delayed, running) are loaded first and ``queue_counts`` is timed;
then ``--history`` finished jobs (nine in ten completed, the rest dead letters) are added with
one bulk statement and it is timed again. ``before_*`` times the statement Caravel ran until
migration 0005 (one GROUP BY over every row), on the same data, for comparison.
"""

from __future__ import annotations

import asyncio
import sqlite3
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from bench.databases import postgres_dsn
from caravel.store import open_reader
from caravel.store.urls import backend_of

#: The counts statement before migration 0005: it reads every row of the jobs table.
BEFORE = """
SELECT queue,
    sum(CASE WHEN state = 'ready' AND due_at <= {now} THEN 1 ELSE 0 END) AS ready,
    sum(CASE WHEN state = 'ready' AND due_at > {now} THEN 1 ELSE 0 END) AS delayed,
    sum(CASE WHEN state = 'running' AND lease_expires_at > {now} THEN 1 ELSE 0 END) AS running,
    sum(CASE WHEN state = 'running' AND lease_expires_at <= {now} THEN 1 ELSE 0 END) AS expired,
    sum(CASE WHEN state = 'dead_letter' THEN 1 ELSE 0 END) AS dead_letter,
    sum(CASE WHEN state = 'completed' THEN 1 ELSE 0 END) AS completed,
    min(CASE WHEN state = 'ready' AND due_at <= {now} THEN due_at END) AS oldest
FROM caravel_jobs GROUP BY queue ORDER BY queue
"""

NOW = 1_000_000_000
# Rows of one queue, state and kind, numbered 1..n: x is the row number; finished rows have no
# available_at, live ones have it (due time or lease expiry).
_COLUMNS = """(id, queue, job_type, tenant_id, payload, state, attempt, max_attempts, due_at,
    available_at, lease_token, lease_expires_at, finished_at, created_at, updated_at)"""
_VALUES = """'{queue}', 'bench.noop.v1', 'bench', '{{"n":' || x || '}}', '{state}', 1, 3,
    {due}, {available}, 1, {lease}, {finished}, 1, 2"""
#: (queue, state, rows or None for --history's share, due, available_at, lease, finished)
_LIVE = (
    ("default", "ready", 2_000, "x", "x", "NULL", "NULL"),
    ("default", "ready", 500, f"{NOW} + x", f"{NOW} + x", "NULL", "NULL"),
    ("default", "running", 500, "x", f"{NOW} + x", f"{NOW} + x", "NULL"),
)


def _finished(history: int) -> tuple[tuple[str, str, int, str, str, str, str], ...]:
    dead = history // 10
    return (
        ("history", "completed", history - dead, "x", "NULL", "NULL", "2"),
        ("history", "dead_letter", dead, "x", "NULL", "NULL", "2"),
    )


def _load(url: str, rows: tuple[tuple[str, str, int, str, str, str, str], ...]) -> None:
    postgres = backend_of(url) == "postgresql"
    statements = []
    for queue, state, n, due, available, lease, finished in rows:
        values = _VALUES.format(
            queue=queue,
            state=state,
            due=due,
            available=available,
            lease=lease,
            finished=finished,
        )
        if postgres:
            statements.append(
                f"INSERT INTO caravel_jobs {_COLUMNS} SELECT gen_random_uuid(), {values} "
                f"FROM generate_series(1, {n}) AS x"
            )
        else:
            statements.append(
                f"WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < {n}) "
                f"INSERT INTO caravel_jobs {_COLUMNS} SELECT lower(hex(randomblob(16))), "
                f"{values} FROM g"
            )
    if postgres:
        with psycopg.connect(postgres_dsn(url), autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)  # type: ignore[arg-type]
            conn.execute("VACUUM ANALYZE caravel_jobs")
            conn.execute("CHECKPOINT")
        return
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        for statement in statements:
            conn.execute(statement)
        conn.execute("ANALYZE")
        conn.commit()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def _before(url: str) -> tuple[Callable[[], None], Callable[[], None]]:
    """The statement before 0005 on one connection kept open, and how to close it."""
    text = BEFORE.format(now=NOW)
    if backend_of(url) == "postgresql":
        pg = psycopg.connect(postgres_dsn(url), autocommit=True)
        return lambda: pg.execute(text).fetchall() and None, pg.close  # type: ignore[arg-type]
    lite = sqlite3.connect(url.removeprefix("sqlite:///"), check_same_thread=False)
    return lambda: lite.execute(text).fetchall() and None, lite.close


async def _median_ms(call: Callable[[], Awaitable[Any]], calls: int) -> float:
    await call()  # warm: connections, statement caches
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        await call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


async def _timings(url: str, calls: int) -> tuple[float, float, list[Any]]:
    reader = open_reader(url)
    before, close = _before(url)
    try:
        after_ms = await _median_ms(lambda: reader.queue_counts(None, NOW), calls)
        before_ms = await _median_ms(lambda: asyncio.to_thread(before), calls)
        counted = await reader.queue_counts(None, NOW)
    finally:
        await reader.close()
        close()
    return after_ms, before_ms, counted


def counts(url: str, history: int, calls: int = 11) -> dict[str, Any]:
    """Median milliseconds of ``queue_counts()`` (and of the statement before 0005) over
    ``calls`` calls, with the live jobs only and then with ``history`` finished jobs too."""
    _load(url, _LIVE)
    after_live, before_live, _ = asyncio.run(_timings(url, calls))
    _load(url, _finished(history))
    after_full, before_full, counted = asyncio.run(_timings(url, calls))
    by_queue = {c.queue: c for c in counted}
    return {
        "finished_rows": history,
        "live_rows": sum(n for _, _, n, *_ in _LIVE),
        "after_ms_live_only": after_live,
        "after_ms": after_full,
        "before_ms_live_only": before_live,
        "before_ms": before_full,
        "reported_completed": by_queue["history"].completed,
        "reported_dead_letter": by_queue["history"].dead_letter,
    }
