"""The database's own ceilings, beside the queue's figures: what each kind of commit costs in
WAL flushes, the same per-job SQL done by a plain driver loop, SQLite's durable commit rate, and
MariaDB's durable commit rate and multi-row insert through the bare drivers. Each takes a
migrated, empty queue database URL and returns a dictionary of figures."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
import uuid
from typing import Any

import psycopg

from bench.apps import QUEUE, Noop, registry
from bench.databases import mariadb_connect, mariadb_connect_args, postgres_dsn
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


# ----- MariaDB's own ceilings -----------------------------------------------------------------


class MariaRow:
    """A row Caravel wrote, to be inserted again by the bare driver with a new id and key: the
    stored columns (the generated ones and the insertion number ``seq`` left to the server),
    read over PyMySQL from a queue holding at least one job."""

    def __init__(self, url: str) -> None:
        with contextlib.closing(mariadb_connect(url)) as conn, conn.cursor() as cursor:
            cursor.execute(
                "SELECT COLUMN_NAME FROM information_schema.COLUMNS"
                " WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'caravel_jobs'"
                " AND GENERATION_EXPRESSION IS NULL AND EXTRA NOT LIKE '%%auto_increment%%'"
                " ORDER BY ORDINAL_POSITION"
            )
            self.columns = [str(row[0]) for row in cursor.fetchall()]
            cursor.execute(f"SELECT {', '.join(self.columns)} FROM caravel_jobs LIMIT 1")
            found = cursor.fetchone()
        assert found is not None, "enqueue a job first: its row is the one copied"
        self.row = list(found)
        self.id_at = self.columns.index("id")
        self.key_at = self.columns.index("idempotency_key")
        marks = ", ".join(["%s"] * len(self.columns))
        self.sql = f"INSERT INTO caravel_jobs ({', '.join(self.columns)}) VALUES ({marks})"

    def rows(self, prefix: str, n: int) -> list[tuple[Any, ...]]:
        made = []
        for i in range(n):
            row = list(self.row)
            row[self.id_at] = str(uuid.uuid4())
            row[self.key_at] = f"{prefix}-{i}"
            made.append(tuple(row))
        return made


def _asyncmy_connect(url: str, *, autocommit: bool) -> Any:
    import asyncmy

    return asyncmy.connect(**mariadb_connect_args(url), autocommit=autocommit)


async def _interleaved(url: str, copy: MariaRow, n: int, rounds: int) -> dict[str, float]:
    """Seconds per commit of each way of committing one row, over ``n`` commits each, the ways
    taking turns ``rounds`` times (so a disk whose flushes slow down meanwhile slows them
    alike), each over a connection opened and warmed up beforehand: see
    :func:`mariadb_commit_limit`."""
    auto = await _asyncmy_connect(url, autocommit=True)
    each = await _asyncmy_connect(url, autocommit=False)
    blocking = mariadb_connect(url)
    queue = DatabaseQueue(url, registry)
    size = max(1, n // rounds)
    spent = {"asyncmy": 0.0, "asyncmy_each": 0.0, "pymysql": 0.0, "caravel": 0.0}
    try:
        async with auto.cursor() as auto_cursor, each.cursor() as each_cursor:
            cursor = blocking.cursor()

            async def by_autocommit(rows: list[tuple[Any, ...]]) -> None:
                for row in rows:
                    await auto_cursor.execute(copy.sql, row)

            async def by_commit(rows: list[tuple[Any, ...]]) -> None:
                for row in rows:
                    await each_cursor.execute(copy.sql, row)
                    await each.commit()

            async def by_pymysql(rows: list[tuple[Any, ...]]) -> None:
                for row in rows:
                    cursor.execute(copy.sql, row)

            async def by_caravel(rows: list[tuple[Any, ...]]) -> None:
                for row in rows:  # the copy's key, on Caravel's own row
                    await queue.enqueue(Noop(0), dispatch(row[copy.key_at]))

            ways = {
                "asyncmy": by_autocommit,
                "asyncmy_each": by_commit,
                "pymysql": by_pymysql,
                "caravel": by_caravel,
            }
            for name, way in ways.items():  # warm-up: each way's first commit untimed
                await way(copy.rows(f"warm-{name}", 1))
            for turn in range(rounds):
                for name, way in ways.items():
                    rows = copy.rows(f"{name}-{turn}", size)
                    started = time.perf_counter()
                    await way(rows)
                    spent[name] += time.perf_counter() - started
            cursor.close()
    finally:
        await queue.close()
        blocking.close()
        await auto.ensure_closed()
        await each.ensure_closed()
    return {name: seconds / (size * rounds) for name, seconds in spent.items()}


def mariadb_commit_limit(url: str, n: int = 2000, rounds: int = 4) -> dict[str, Any]:
    """MariaDB's own durable commit rate for one client, measured as PostgreSQL's floor is
    (``bench.sync_cost``'s ``bare``): the bare driver inserting a copy of the very row Caravel
    wrote, with a new id and key, one row per transaction, over one connection opened
    beforehand; beside it Caravel's own one-call ``enqueue`` (a key per job), the ways taking
    turns ``rounds`` times, ``n`` commits each in all.

    ``commits_per_second`` is asyncmy (the queue's driver) in autocommit, each INSERT its own
    durable commit in one round trip: the ceiling. ``insert_commit_per_second`` is the same with
    an explicit COMMIT after each INSERT (two round trips, as a store transaction sends them),
    ``pymysql_commits_per_second`` PyMySQL (the synchronous driver) in autocommit, and
    ``enqueue_per_second`` Caravel's awaited enqueue; ``enqueue_share_of_ceiling`` is the last
    over the first. Durable as the server is configured (``innodb_flush_log_at_trx_commit``, in
    the report's ``mariadb`` section)."""

    async def run() -> dict[str, float]:
        async with DatabaseQueue(url, registry) as queue:
            await queue.enqueue(Noop(0), dispatch("ceiling-seed"))
        return await _interleaved(url, MariaRow(url), n, rounds)

    per_commit = asyncio.run(run())
    rates = {name: 1 / seconds for name, seconds in per_commit.items()}
    return {
        "commits": n,
        "rounds": rounds,
        "commits_per_second": rates["asyncmy"],
        "insert_commit_per_second": rates["asyncmy_each"],
        "pymysql_commits_per_second": rates["pymysql"],
        "enqueue_per_second": rates["caravel"],
        "enqueue_share_of_ceiling": rates["caravel"] / rates["asyncmy"],
    }


async def _asyncmy_bulk(url: str, copy: MariaRow, rows: list[tuple[Any, ...]], batch: int) -> float:
    conn = await _asyncmy_connect(url, autocommit=False)
    try:
        async with conn.cursor() as cursor:
            await cursor.executemany(copy.sql, copy.rows("warm-bulk", 2))
            await conn.commit()
            started = time.perf_counter()
            for start in range(0, len(rows), batch):
                # asyncmy sends a multi-row INSERT for each executemany (as PyMySQL does).
                await cursor.executemany(copy.sql, rows[start : start + batch])
                await conn.commit()
            return time.perf_counter() - started
    finally:
        await conn.ensure_closed()


def mariadb_bulk_floor(url: str, n: int, batch: int = 1000) -> dict[str, Any]:
    """The floor under a bulk enqueue on MariaDB (PostgreSQL's is a bare binary ``COPY``,
    ``bench.enqueue_cost``): asyncmy's multi-row INSERT of copies of the row Caravel wrote (new
    ids and keys), ``batch`` rows per transaction, each committed durably. No validation, no
    serialization, no key probe. ``url`` must hold a job already."""
    copy = MariaRow(url)
    seconds = asyncio.run(_asyncmy_bulk(url, copy, copy.rows("floor", n), batch))
    return {"jobs": n, "batch": batch, "seconds": seconds, "jobs_per_second": n / seconds}
