"""``python -m bench --only retention``: what retention costs the queue (issue 21).

- ``tombstones``: the drain and the one-job enqueue on an empty queue, then again on a queue whose
  idempotency index also holds ``--history`` tombstones (pruned keyed jobs, in the same queue and
  tenant), seeded with one SQL statement.
- ``prune``: ``--history`` old completed jobs (half keyed) are pruned in batches of 1,000 while
  one worker drains ready jobs of the same queue; the longest pause between two claims during the
  prune, beside the longest pause of the same drain with no prune running.
"""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
import time
from datetime import timedelta
from typing import Any

import psycopg

from bench import runs
from bench.apps import QUEUE, Noop
from bench.databases import postgres_dsn
from caravel import DatabaseQueue, JobContext, JobRegistry, QueueWorker, Retention, WorkerOptions
from caravel.store.urls import backend_of

__all__ = ["prune_during_drain", "tombstones"]

#: (state, payload, available_at, finished_at, pruned_at, content_hash, key) per seeded kind.
_KINDS = {
    "tombstone": ("pruned", "''", "NULL", "2", "3", "repeat('0', 64)", "'t-' || x"),
    "old": ("completed", "'{\"n\":' || x || '}'", "NULL", "2", "NULL", "NULL",
            "CASE WHEN x % 2 = 0 THEN 'o-' || x END"),
    "ready": ("ready", "'{\"n\":' || x || '}'", "1", "NULL", "NULL", "NULL", "NULL"),
}  # fmt: skip


def seed(url: str, kind: str, rows: int) -> None:
    """``rows`` jobs of ``kind`` in the bench queue and tenant, straight through SQL."""
    state, payload, available, finished, pruned, hashed, key = _KINDS[kind]
    columns = (
        "(id, queue, job_type, tenant_id, idempotency_key, payload, state, attempt, max_attempts,"
        " due_at, available_at, lease_token, finished_at, pruned_at, content_hash, created_at,"
        " updated_at)"
    )
    values = (
        f"'{QUEUE}', 'bench.noop.v1', 'bench', {key}, {payload}, '{state}', 1, 3, 1, {available},"
        f" 1, {finished}, {pruned}, {hashed}, 1, 2"
    )
    if backend_of(url) == "postgresql":
        with psycopg.connect(postgres_dsn(url), autocommit=True) as conn:
            conn.execute(  # type: ignore[call-overload]
                f"INSERT INTO caravel_jobs {columns} SELECT gen_random_uuid(), {values}"
                f" FROM generate_series(1, {int(rows)}) AS x"
            )
            conn.execute("VACUUM ANALYZE caravel_jobs")
            conn.execute("CHECKPOINT")
        return
    with sqlite3.connect(url.removeprefix("sqlite:///")) as lite:
        lite.execute(
            f"WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < {int(rows)})"
            f" INSERT INTO caravel_jobs {columns} SELECT lower(hex(randomblob(16))), {values}"
            " FROM g".replace("repeat('0', 64)", "'" + "0" * 64 + "'")
        )
        lite.execute("ANALYZE")
        lite.commit()
        lite.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def tombstones(
    empty_url: str, full_url: str, again_url: str, rows: int, jobs: int, single: int,
    concurrency: int,
) -> dict[str, Any]:  # fmt: skip
    """Drain and one-job enqueue on ``empty_url``, on ``full_url`` after seeding ``rows``
    tombstones there, and on ``again_url``, empty too."""
    figures: dict[str, Any] = {"tombstones": rows, "jobs": jobs, "single": single}
    seed(full_url, "tombstone", rows)
    # The empty queue is measured again last: the two empty figures show the run's noise.
    for name, url in (("empty", empty_url), ("tombstones", full_url), ("empty_again", again_url)):
        drained = asyncio.run(runs.drain(url, jobs, concurrency))
        enqueued = asyncio.run(runs.enqueue_single(url, single))
        figures[f"drain_jobs_per_second_{name}"] = drained["jobs_per_second"]
        figures[f"enqueue_jobs_per_second_{name}"] = enqueued["jobs_per_second"]
    return figures


async def _drain_gaps(url: str, jobs: int, concurrency: int, *, pruning: bool) -> dict[str, Any]:
    """Drain ``jobs`` seeded ready jobs; with ``pruning``, prune at the same time. The longest
    gap between two handler starts while the prune ran (or over the whole drain without it)."""
    starts: list[float] = []
    done = asyncio.Event()
    counting = JobRegistry()

    @counting.handles("bench.noop.v1", Noop)
    async def count(job: Noop, ctx: JobContext[None]) -> None:
        starts.append(time.perf_counter())
        if len(starts) == jobs:
            done.set()

    figures: dict[str, Any] = {}
    async with DatabaseQueue(url, counting) as queue, DatabaseQueue(url, JobRegistry()) as ops:
        worker = QueueWorker(queue, options=WorkerOptions(concurrency=concurrency))
        running = asyncio.create_task(worker.run(QUEUE))
        began = time.perf_counter()
        window = (began, float("inf"))
        if pruning:
            await asyncio.sleep(0.5)  # let the drain get going first
            started = time.perf_counter()
            pruned = await ops.prune(Retention(completed=timedelta(days=1)))
            ended = time.perf_counter()
            window = (started, ended)
            figures.update(
                prune_seconds=ended - started,
                pruned=pruned.deleted + pruned.tombstoned,
                tombstoned=pruned.tombstoned,
                drained_during_prune=sum(1 for t in starts if started <= t <= ended),
            )
            last = min(ended, max(starts, default=started))
            if last > started:
                figures["drain_jobs_per_second_during_prune"] = figures["drained_during_prune"] / (
                    last - started
                )
        await done.wait()
        worker.stop()
        await running
        await worker.close()
        figures["drain_seconds"] = max(starts) - began
    inside = [t for t in starts if window[0] <= t <= window[1]]
    gaps = [b - a for a, b in itertools.pairwise(inside)]
    figures["longest_claim_pause_ms"] = max(gaps, default=0.0) * 1000
    return figures


def prune_during_drain(
    quiet_url: str, busy_url: str, rows: int, jobs: int, concurrency: int
) -> dict[str, Any]:
    """The drain of ``jobs`` on ``quiet_url`` with nothing else, then on ``busy_url`` while
    ``rows`` old completed jobs of the same queue are pruned."""
    seed(quiet_url, "ready", jobs)
    quiet = asyncio.run(_drain_gaps(quiet_url, jobs, concurrency, pruning=False))
    seed(busy_url, "old", rows)
    seed(busy_url, "ready", jobs)
    busy = asyncio.run(_drain_gaps(busy_url, jobs, concurrency, pruning=True))
    return {
        "finished_rows": rows,
        "jobs": jobs,
        "concurrency": concurrency,
        "longest_claim_pause_ms_no_prune": quiet["longest_claim_pause_ms"],
        "drain_seconds_no_prune": quiet["drain_seconds"],
        **{f"{key}": value for key, value in busy.items() if key != "longest_claim_pause_ms"},
        "longest_claim_pause_ms_during_prune": busy["longest_claim_pause_ms"],
    }
