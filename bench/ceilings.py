"""The database's own ceilings, beside the queue's figures: what each kind of commit costs in
WAL flushes, the same per-job SQL done by a plain driver loop, and SQLite's durable commit
rate. Each takes a migrated, empty queue database URL and returns a dictionary of figures."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from typing import Any

import psycopg

from bench.apps import QUEUE, Noop, registry
from bench.databases import postgres_dsn
from bench.runs import dispatch
from caravel import DatabaseQueue, Leases
from caravel.store.urls import backend_of

# ----- durability -----------------------------------------------------------------------------


def _wal_syncs(url: str) -> int:
    with psycopg.connect(postgres_dsn(url), autocommit=True) as conn:
        row = conn.execute("SELECT wal_sync FROM pg_stat_wal").fetchone()
    return int(row[0]) if row else 0


def durability(url: str, n: int = 200, settle: float = 2.0) -> dict[str, Any]:
    """What each kind of commit costs in WAL flushes (PostgreSQL's ``pg_stat_wal.wal_sync``):
    ``n`` one-job enqueues, ``n`` one-job claims, then ``n / 2`` one-job acknowledgements as
    the worker sends them by default and ``n / 2`` durable ones, one after the other. Durable
    commits flush once each; default acknowledgements commit asynchronously and leave flushing
    to the WAL writer. (Server statistics reach ``pg_stat_wal`` about a second after
    the statements, hence the ``settle`` pauses; this is a count, not a timing.)"""

    async def phase(step: Any) -> int:
        before = _wal_syncs(url)
        async with DatabaseQueue(url, registry) as queue:
            await step(queue)
        await asyncio.sleep(settle)
        return _wal_syncs(url) - before

    async def enqueue(queue: DatabaseQueue) -> None:
        for i in range(n):
            await queue.enqueue(Noop(i), dispatch(f"durable-{i}"))

    leases: list[Any] = []

    async def claim(queue: DatabaseQueue) -> None:
        held = Leases(queue)
        for _ in range(n):
            claimed = await held.claim(QUEUE)
            assert claimed is not None
            leases.append(claimed.lease)

    async def acknowledge(queue: DatabaseQueue) -> None:
        held = Leases(queue)
        for lease in leases[: n // 2]:
            await held.complete(lease)

    async def acknowledge_durably(queue: DatabaseQueue) -> None:
        held = Leases(queue, durable_acks=True)
        for lease in leases[n // 2 :]:
            await held.complete(lease)

    async def run() -> dict[str, Any]:
        await asyncio.sleep(settle)
        return {
            "jobs": n,
            "wal_syncs_enqueue": await phase(enqueue),
            "wal_syncs_claim": await phase(claim),
            "wal_syncs_acknowledge": await phase(acknowledge),
            "wal_syncs_acknowledge_durable": await phase(acknowledge_durably),
        }

    return asyncio.run(run())


# ----- the plain-SQL limit --------------------------------------------------------------------

_PG_INSERT = """
INSERT INTO caravel_jobs (id, queue, job_type, tenant_id, payload, state, attempt,
    max_attempts, due_at, available_at, lease_token, created_at, updated_at)
SELECT gen_random_uuid(), 'sql', 'bench.noop.v1', 'bench', '{"n":1}', 'ready', 0, 3,
    1, 1, 0, 1, 1 FROM generate_series(1, %s)
"""
_PG_CLAIM = """
UPDATE caravel_jobs SET state = 'running', attempt = attempt + 1, lease_token = lease_token + 1,
    lease_expires_at = 9e15, available_at = 9e15, started_at = 2, updated_at = 2
WHERE id = ANY(ARRAY(SELECT id FROM caravel_jobs WHERE queue = 'sql' AND available_at <= 2
    ORDER BY available_at LIMIT %s FOR UPDATE SKIP LOCKED))
RETURNING id, lease_token, payload
"""
_PG_COMPLETE = """
UPDATE caravel_jobs SET state = 'completed', available_at = NULL, lease_expires_at = NULL,
    finished_at = 3, updated_at = 3
WHERE id = ANY(%s) AND state = 'running'
"""


def sql_limit(url: str, n: int, batch: int) -> dict[str, Any]:
    """The same per-job SQL work (insert, claim, complete) done by a plain driver loop in
    batches of ``batch``: the ceiling a Python worker over this schema could approach."""
    started = time.perf_counter()
    if backend_of(url) == "postgresql":
        with psycopg.connect(postgres_dsn(url)) as conn:
            for _ in range(0, n, batch):
                conn.execute(_PG_INSERT, (batch,))
                conn.commit()
                rows = conn.execute(_PG_CLAIM, (batch,)).fetchall()
                conn.commit()
                conn.execute(_PG_COMPLETE, ([r[0] for r in rows],))
                conn.commit()
    else:
        path = url.removeprefix("sqlite:///")
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        for _ in range(0, n, batch):
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(
                "INSERT INTO caravel_jobs (id, queue, job_type, tenant_id, payload, state, "
                "attempt, max_attempts, due_at, available_at, lease_token, created_at, "
                "updated_at) VALUES (lower(hex(randomblob(16))), 'sql', 'bench.noop.v1', "
                "'bench', '{\"n\":1}', 'ready', 0, 3, 1, 1, 0, 1, 1)",
                [()] * batch,
            )
            conn.execute("COMMIT")
            conn.execute("BEGIN IMMEDIATE")
            ids = [
                r[0]
                for r in conn.execute(
                    "UPDATE caravel_jobs SET state='running', attempt=attempt+1, "
                    "lease_token=lease_token+1, available_at=9e15 WHERE id IN (SELECT id FROM "
                    "caravel_jobs WHERE queue='sql' AND available_at <= 2 ORDER BY available_at "
                    "LIMIT ?) RETURNING id, payload",
                    (batch,),
                ).fetchall()
            ]
            conn.execute("COMMIT")
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(
                "UPDATE caravel_jobs SET state='completed', available_at=NULL WHERE id = ? "
                "AND state='running'",
                [(i,) for i in ids],
            )
            conn.execute("COMMIT")
        conn.close()
    elapsed = time.perf_counter() - started
    return {"jobs": n, "batch": batch, "seconds": elapsed, "jobs_per_second": n / elapsed}


def sqlite_commit_limit(url: str, n: int = 2000) -> dict[str, Any]:
    """SQLite's own durable commit rate on this disk: one single-row insert per commit."""
    path = url.removeprefix("sqlite:///")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE IF NOT EXISTS commit_probe (x INTEGER)")
    started = time.perf_counter()
    for i in range(n):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO commit_probe VALUES (?)", (i,))
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    conn.close()
    return {"commits": n, "commits_per_second": n / elapsed}
