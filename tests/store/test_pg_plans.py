"""PostgreSQL's plans for the worker's hot statements stay proportional to the batch.

Two plans once made a drain slower the longer it ran, and neither shows in a test that only
checks results:

* a claim on a table that filled up before autovacuum analysed it read every due row and sorted
  them, because without column statistics the planner guesses that a handful of rows are due;
* an acknowledgement batch, once the server switched the prepared statement to a generic plan
  (which cannot know how many leases the arrays hold), re-scanned the unnested leases for every
  row it updated: 150 ms for 1,000 leases instead of 10.

Each test reads the plan PostgreSQL chose (``EXPLAIN``) on a connection the store uses for its
hot paths, on a real database without statistics.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import pytest
from psycopg import sql

from caravel import DatabaseQueue, Leases
from caravel.errors import StoreError
from caravel.store.postgresql import PostgresStore
from tests.support import Add, dispatch, open_queue
from tests.support.databases import pg_database

JOBS = 1000


@pytest.fixture
def fresh_pg_url() -> Iterator[str]:
    """A migrated database whose jobs table autovacuum never analyses during the test."""
    with pg_database(migrated=True) as url:
        dsn = url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ALTER TABLE caravel_jobs SET (autovacuum_enabled = false)")
        yield url


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


async def _explain(driver: psycopg.AsyncConnection[Any], statement: sql.Composable) -> list[Any]:
    cursor = await driver.execute(sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) ") + statement)
    row = await cursor.fetchone()
    assert row is not None
    return list(_nodes(row[0][0]["Plan"]))


def _rows_read(node: dict[str, Any]) -> int:
    rows: int = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
    return rows


def _store(queue: DatabaseQueue) -> PostgresStore:
    store = getattr(queue.store, "inner", queue.store)  # under the telemetry wrapper
    assert isinstance(store, PostgresStore)
    return store


@asynccontextmanager
async def _hot_connection(store: PostgresStore) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """A connection the store keeps for its claims and acknowledgement batches."""
    async with store._autocommit("test", index_only=True) as driver:
        try:
            yield driver
        finally:
            await driver.execute("RESET plan_cache_mode")


@asynccontextmanager
async def _pooled_connection(store: PostgresStore) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """The connection the store's pool lends next, as any of its other statements get it."""
    async with store.engine.connect() as conn:
        raw = await conn.get_raw_connection()
        driver: psycopg.AsyncConnection[Any] = raw.driver_connection
        yield driver
        await driver.rollback()


def _prepared(text: str) -> tuple[str, list[str]]:
    """The store's compiled statement with ``$n`` placeholders, for ``PREPARE``; and the
    parameter names in ``$n`` order."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    return re.sub(r"%\((\w+)\)b", number, text), names


async def _fill(queue: DatabaseQueue) -> None:
    await queue.enqueue_many([(Add(i), dispatch()) for i in range(JOBS)])


async def test_a_claim_without_statistics_reads_only_its_batch(fresh_pg_url: str) -> None:
    async with open_queue(fresh_pg_url) as queue:
        await _fill(queue)
        store = _store(queue)
        text, defaults = store._compiled(
            "claim_ready", lambda: store._claim_statement("ready", literal_limit=False)
        )
        now = queue.clock.now_ms()
        values = {**defaults, "b_queue": "default", "b_now": now, "b_expires": now + 30_000}
        text = text.replace("%(b_limit)b", "10")
        # The hazard is real on this server: with the planner's defaults, some step of the
        # plan reads every job to claim ten (a sequential scan to find the ten picked rows, or a
        # bitmap scan and a sort of every due row on a larger table).
        async with _pooled_connection(store) as pooled:
            default_plan = await _explain(pooled, _inline(pooled, text, values))
        assert max(_rows_read(n) for n in default_plan) == JOBS

        async with _hot_connection(store) as driver:
            plan = await _explain(driver, _inline(driver, text, values))
        assert plan[0]["Actual Rows"] == 10  # ten claimed
        scans = sorted((n["Node Type"], n.get("Index Name"), _rows_read(n)) for n in plan)
        scans = [scan for scan in scans if scan[0].endswith("Scan")]
        assert scans == [
            # The plain claim's check that its queue has no limits row: one probe, nothing read.
            ("Index Only Scan", "pk_caravel_queue_limits", 0),
            ("Index Scan", "ix_caravel_jobs_ranked", 10),
            ("Index Scan", "pk_caravel_jobs", 10),
            ("Subquery Scan", None, 10),
        ]
        assert "Sort" not in {n["Node Type"] for n in plan}


async def test_an_acknowledgement_batch_probes_each_lease_once_under_a_generic_plan(
    fresh_pg_url: str,
) -> None:
    async with open_queue(fresh_pg_url) as queue:
        await _fill(queue)
        leases = [job.lease for job in await Leases(queue).claim_many("default", JOBS)]
        assert len(leases) == JOBS
        store = _store(queue)
        text, defaults = store._compiled("complete", store._complete_statement)
        prepared, names = _prepared(text)
        values = {**defaults, **store._held_params(leases), "b_now": queue.clock.now_ms()}
        async with _hot_connection(store) as driver:
            await driver.execute("SET plan_cache_mode = force_generic_plan")
            await driver.execute(sql.SQL("PREPARE ack AS ") + sql.SQL(prepared))
            args = sql.SQL(", ").join(sql.Literal(values[name]) for name in names)
            plan = await _explain(driver, sql.SQL("EXECUTE ack({})").format(args))
            await driver.execute("DEALLOCATE ack")
        assert plan[0]["Actual Rows"] == JOBS  # every lease was held and completed
        unnested = [n for n in plan if n["Node Type"] == "Function Scan"]
        assert [n["Actual Loops"] for n in unnested] == [1]
        probes = [n for n in plan if n.get("Index Name") == "pk_caravel_jobs"]
        assert [(n["Actual Loops"], n["Actual Rows"]) for n in probes] == [(JOBS, 1)]


def _inline(driver: psycopg.AsyncConnection[Any], text: str, values: dict[str, Any]) -> sql.SQL:
    """The store's compiled statement with its parameters written in as literals."""
    return sql.SQL(
        re.sub(r"%\((\w+)\)b", lambda m: sql.Literal(values[m.group(1)]).as_string(driver), text)
    )


async def test_only_the_workers_statements_plan_with_index_scans_only(fresh_pg_url: str) -> None:
    async with open_queue(fresh_pg_url) as queue:
        store = _store(queue)
        job = await queue.enqueue(Add(1), dispatch())  # a one-job enqueue: a hot connection
        claimed = await Leases(queue).claim_many("default", 1)  # a claim: one kept for the worker
        assert [c.job_id for c in claimed] == [job.job_id]
        (for_enqueues,) = store._hot.idle[False]
        (for_the_worker,) = store._hot.idle[True]
        assert await _settings(for_enqueues.driver_connection) == ("on", "on")
        assert await _settings(for_the_worker.driver_connection) == ("off", "off")
        await Leases(queue).complete(claimed[0].lease)  # the acknowledgement takes the same one
        assert store._hot.idle[True] == [for_the_worker]


async def test_a_connection_given_back_to_the_pool_plans_with_the_server_defaults(
    fresh_pg_url: str,
) -> None:
    async with open_queue(fresh_pg_url) as queue:
        store = _store(queue)
        fairy = await store._hot.check_out(index_only=True)
        hot: psycopg.AsyncConnection[Any] = fairy.driver_connection
        hot_pid = hot.info.backend_pid
        assert await _settings(hot) == ("off", "off")
        await store._hot.give_back(fairy, index_only=True)
        async with _pooled_connection(store) as pooled:  # the pool's one idle connection
            assert pooled.info.backend_pid == hot_pid
            assert await _settings(pooled) == ("on", "on")


async def _settings(driver: psycopg.AsyncConnection[Any]) -> tuple[str, str]:
    cursor = await driver.execute(
        "SELECT current_setting('enable_bitmapscan'), current_setting('enable_seqscan')"
    )
    row = await cursor.fetchone()
    assert row is not None
    return row[0], row[1]


async def test_a_connection_the_server_dropped_is_discarded_on_its_way_back(
    fresh_pg_url: str,
) -> None:
    async with open_queue(fresh_pg_url) as queue:
        store = _store(queue)
        fairy = await store._hot.check_out(index_only=True)
        dropped = fairy.driver_connection.info.backend_pid
        dsn = fresh_pg_url.replace("postgresql+psycopg://", "postgresql://")
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as admin:
            # With a timeout, it returns once the backend has gone.
            await admin.execute("SELECT pg_terminate_backend(%s, 10000)", (dropped,))
        # Giving its settings back fails; the connection is discarded instead of pooled.
        await store._hot.give_back(fairy, index_only=True)
        async with _pooled_connection(store) as pooled:
            assert pooled.info.backend_pid != dropped
        await queue.enqueue(Add(1), dispatch())
        assert len(await Leases(queue).claim_many("default", 5)) == 1


async def test_an_enqueue_after_its_hot_connection_was_dropped_runs_on_a_fresh_one(
    fresh_pg_url: str,
) -> None:
    async with open_queue(fresh_pg_url) as queue:
        store = _store(queue)
        await queue.enqueue(Add(1), dispatch())  # keeps a hot connection, and its cursor
        (fairy,) = store._hot.idle[False]
        dropped = fairy.driver_connection.info.backend_pid
        dsn = fresh_pg_url.replace("postgresql+psycopg://", "postgresql://")
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as admin:
            await admin.execute("SELECT pg_terminate_backend(%s, 10000)", (dropped,))
        with pytest.raises(StoreError):
            await queue.enqueue(Add(2), dispatch())
        # The dropped connection's cursor went with it: the next enqueue gets a working one.
        await queue.enqueue(Add(3), dispatch())
        (kept,) = store._hot.idle[False]
        assert kept.driver_connection.info.backend_pid != dropped
        assert len(await Leases(queue).claim_many("default", 5)) == 2
