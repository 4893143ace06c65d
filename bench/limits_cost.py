"""``python -m bench --only limits``: what flow control costs a drain, and the plans of the
limited claims.

The drain (:func:`bench.runs.drain`: one worker, ``--concurrency`` slots, ``--jobs`` no-op jobs)
runs under each of :data:`SETTINGS`, the settings taking turns within each run on fresh
databases (so a machine whose speed drifts affects all alike); ``__main__`` takes the medians
and :func:`ratios` sets each against the plain drain:

- ``plain``: no limit stored, the plain claim (the ``drain`` scenario's figure, measured again);
- ``concurrency``: a concurrency limit of :data:`CONCURRENCY` on the queue;
- ``per_key``: at most :data:`PER_KEY` running per partition key, the jobs spread round-robin
  over :data:`KEYS` keys (job ``i`` has key ``i % KEYS``);
- ``fair``: fair dispatch over :data:`TENANTS` tenants (job ``i`` is tenant ``i % TENANTS``'s);
- ``rate``: a rate of :data:`RATE` starts a second, which a drain this size never reaches: what
  the rated claim's reads and its log of starts cost.

:func:`plans` loads ``--limits-plan-backlog`` ready jobs over :data:`KEYS` partition keys (with a
claim's batch already running, as in a drain), stores each of :data:`PLANNED` in turn and runs
two limited claims of a worker's batch through the store: one timed, then one capturing the plan
of every statement it sends (PostgreSQL: ``EXPLAIN (ANALYZE, BUFFERS)``, inside a savepoint rolled
back before the statement itself runs; SQLite: ``EXPLAIN QUERY PLAN``). First on the table as
filled, without statistics, as every drain above finds it (``without_statistics``; SQLite's
``as_is``: Caravel never runs ``ANALYZE`` there); then, on PostgreSQL, once more after
``VACUUM ANALYZE`` (``analysed``), as autovacuum keeps a table that has lived a while.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import psycopg
from psycopg.rows import namedtuple_row
from sqlalchemy import event
from sqlalchemy.engine import Engine

from bench.apps import QUEUE, registry
from bench.databases import postgres_dsn
from bench.runs import fill_backlog
from caravel import ConcurrencyLimit, DatabaseQueue, DispatchOptions, RateLimit, StoreError
from caravel.store.postgresql import driver_plans
from caravel.store.postgresql import store as pg_store
from caravel.store.protocol import ClaimRequest
from caravel.store.urls import backend_of

#: The overall cap of the ``concurrency`` setting.
CONCURRENCY = 1000
#: The cap per partition key of the ``per_key`` setting, and how many keys its jobs spread over.
PER_KEY = 2
KEYS = 1000
#: How many tenants the ``fair`` setting's jobs spread over.
TENANTS = 100
#: The ``rate`` setting's starts per second: above anything this machine drains.
RATE = 1_000_000
#: The claims' leases: longer than the plans take, so a batch stays running throughout.
LEASE_MS = 600_000
#: How long a statement may run under ``EXPLAIN ANALYZE`` before its plan is taken without it.
EXPLAIN_TIMEOUT_MS = 10_000


def by_key(i: int) -> DispatchOptions:
    """Job ``i`` with partition key ``i % KEYS``."""
    return DispatchOptions(queue=QUEUE, tenant_id="bench", partition_key=f"k{i % KEYS:04d}")


def by_tenant(i: int) -> DispatchOptions:
    """Job ``i`` of tenant ``i % TENANTS``."""
    return DispatchOptions(queue=QUEUE, tenant_id=f"t{i % TENANTS:03d}")


#: Each setting's backlog and limit (keyword arguments of :func:`bench.runs.drain`).
SETTINGS: dict[str, dict[str, Any]] = {
    "plain": {},
    "concurrency": {"limit": ConcurrencyLimit(queue=QUEUE, concurrency=CONCURRENCY)},
    "per_key": {"spread": by_key, "limit": ConcurrencyLimit(queue=QUEUE, per_key=PER_KEY)},
    "fair": {"spread": by_tenant, "limit": ConcurrencyLimit(queue=QUEUE, fair=True)},
    "rate": {"limit": RateLimit(queue=QUEUE, rate=RATE, period=timedelta(seconds=1))},
}


def ratios(figures: Mapping[str, Any], rounds: Mapping[str, list[float]]) -> dict[str, Any]:
    """Each limited setting's jobs/s against the plain drain's: the ratio of the medians
    (``ratio_<setting>``) and the median of the ratios within each round
    (``paired_ratio_<setting>``, the settings of a round having run one after another)."""
    found: dict[str, Any] = {}
    plain = figures["jobs_per_second_plain"]
    for name in SETTINGS:
        if name == "plain":
            continue
        found[f"ratio_{name}"] = figures[f"jobs_per_second_{name}"] / plain
        paired = sorted(a / b for a, b in zip(rounds[name], rounds["plain"], strict=True))
        found[f"paired_ratio_{name}"] = paired[len(paired) // 2]
    return found


# ----- plans ----------------------------------------------------------------------------------

#: The limits whose claims :func:`plans` captures, each stored alone.
PLANNED: dict[str, ConcurrencyLimit | RateLimit] = {
    "concurrency": ConcurrencyLimit(queue=QUEUE, concurrency=CONCURRENCY),
    "per_key": ConcurrencyLimit(queue=QUEUE, per_key=PER_KEY),
    "concurrency_per_key": ConcurrencyLimit(queue=QUEUE, concurrency=CONCURRENCY, per_key=PER_KEY),
    "fair": ConcurrencyLimit(queue=QUEUE, fair=True),
    "rate": RateLimit(queue=QUEUE, rate=RATE, per_key=RATE, period=timedelta(seconds=1)),
}

_QUERIES = ("SELECT", "UPDATE", "DELETE", "WITH")
#: Statements and plan lines are cut at this many characters (a claim of chosen jobs lists them).
_WIDTH = 240


def _cut(text: str) -> str:
    return text if len(text) <= _WIDTH else text[: _WIDTH - 3] + "..."


def _sqlite_tree(rows: list[Any]) -> list[str]:
    """``EXPLAIN QUERY PLAN`` rows (id, parent, unused, detail) as indented lines."""
    depth: dict[int, int] = {0: -1}
    lines = []
    for node, parent, _, detail in rows:
        depth[node] = depth.get(parent, -1) + 1
        lines.append(_cut("  " * depth[node] + str(detail)))
    return lines


@contextmanager
def explained(backend: str) -> Iterator[list[dict[str, Any]]]:
    """Within the block, the plan of every query about the jobs that any engine of this process
    sends (batched executions, such as the log of starts, are left out), each taken just before
    the query itself runs, on its connection and in its transaction."""
    found: list[dict[str, Any]] = []

    def before(
        conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool
    ) -> None:
        if executemany or "caravel_" not in statement:
            return
        if not statement.lstrip().upper().startswith(_QUERIES):
            return
        if backend == "postgresql":
            cursor.execute("SAVEPOINT bench_explain")
            try:
                cursor.execute(f"SET LOCAL statement_timeout = {EXPLAIN_TIMEOUT_MS}")
                cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement, parameters)
            except psycopg.errors.QueryCanceled:
                # Too slow to run: the plan the statement would have run with, not its readings.
                cursor.execute("ROLLBACK TO SAVEPOINT bench_explain")
                cursor.execute("EXPLAIN " + statement, parameters)
            plan = [_cut(str(row[0])) for row in cursor.fetchall()]
            cursor.execute("ROLLBACK TO SAVEPOINT bench_explain")
        else:
            cursor.execute("EXPLAIN QUERY PLAN " + statement, parameters)
            plan = _sqlite_tree(cursor.fetchall())
        found.append({"sql": _cut(" ".join(statement.split())), "plan": plan})

    event.listen(Engine, "before_cursor_execute", before)
    # PostgreSQL's limited claim runs straight on psycopg (caravel.store.postgresql.driver_plans):
    # its statements are explained by the cursors it makes, on its connection.
    # Its first statement travels with the BEGIN, outside any transaction a plan could be
    # taken in: here the BEGIN goes first, on its own.
    running, beginning = pg_store.run_plan_on_driver, driver_plans._begin_with

    async def explaining_run(driver: Any, plan: Any, statement_of: Any) -> Any:
        kept = driver.cursor_factory
        driver.cursor_factory = _explaining_cursor(found)
        try:
            return await running(driver, plan, statement_of)
        finally:
            driver.cursor_factory = kept

    async def begin_apart(driver: Any, compiled: Any, values: Any) -> list[Any]:
        await driver.execute("BEGIN")
        text, params = compiled.bound(values)
        async with driver.cursor(binary=True, row_factory=namedtuple_row) as cursor:
            await cursor.execute(text, params)
            return await cursor.fetchall()

    pg_store.run_plan_on_driver = explaining_run
    driver_plans._begin_with = begin_apart
    try:
        yield found
    finally:
        event.remove(Engine, "before_cursor_execute", before)
        pg_store.run_plan_on_driver = running
        driver_plans._begin_with = beginning


def _explaining_cursor(found: list[dict[str, Any]]) -> type[psycopg.AsyncCursor[Any]]:
    """A psycopg cursor that, before each query about the jobs it runs, adds its plan to
    ``found``, taken as :func:`explained` takes it on PostgreSQL."""

    class ExplainingCursor(psycopg.AsyncCursor[Any]):
        async def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            text = str(query)
            if "caravel_" in text and text.lstrip().upper().startswith(_QUERIES):
                async with self.connection.cursor() as side:
                    await side.execute("SAVEPOINT bench_explain")
                    try:
                        await side.execute(f"SET LOCAL statement_timeout = {EXPLAIN_TIMEOUT_MS}")
                        await side.execute("EXPLAIN (ANALYZE, BUFFERS) " + text, params)
                    except psycopg.errors.QueryCanceled:
                        await side.execute("ROLLBACK TO SAVEPOINT bench_explain")
                        await side.execute("EXPLAIN " + text, params)
                    plan = [_cut(str(row[0])) for row in await side.fetchall()]
                    await side.execute("ROLLBACK TO SAVEPOINT bench_explain")
                found.append({"sql": _cut(" ".join(text.split())), "plan": plan})
            return await super().execute(query, params, **kwargs)

    return ExplainingCursor


def _analyse(url: str) -> None:
    if backend_of(url) == "postgresql":
        with psycopg.connect(postgres_dsn(url), autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE caravel_jobs")


async def plans(url: str, backlog: int, batch: int) -> dict[str, Any]:
    """Under each of :data:`PLANNED`, the time of one limited claim of ``batch`` jobs and the
    plan of each statement of the next, ``backlog`` ready jobs over :data:`KEYS` keys waiting
    and a batch running (see the module docstring): first on the table as filled, without
    statistics (as the drains above find it), then, on PostgreSQL, again once it is analysed."""
    backend = backend_of(url)
    found: dict[str, Any] = {"backlog": backlog, "keys": KEYS, "batch": batch}
    async with DatabaseQueue(url, registry) as queue:
        await fill_backlog(queue, backlog, spread=by_key)
        store = queue.store

        async def claim() -> tuple[list[Any], float, str | None]:
            """One limited claim: the jobs it took, in how many seconds, and why it failed (a
            statement cut by the server's timeout, say)."""
            now = int(time.time() * 1000)
            request = ClaimRequest(QUEUE, batch, now, LEASE_MS, "ready", limited=True)
            started = time.perf_counter()
            try:
                claimed = (await store.job_claim_many(request)).claimed
            except StoreError as exc:
                return [], time.perf_counter() - started, exc.reason or str(exc)
            return claimed, time.perf_counter() - started, None

        async def finish(claimed: list[Any]) -> None:
            await store.job_complete_many([job.lease for job in claimed], int(time.time() * 1000))

        passes = ("without_statistics", "analysed") if backend == "postgresql" else ("as_is",)
        for name in passes:
            if name == "analysed":
                _analyse(url)
            # A batch left running, as while a worker drains (claimed plain: no limit stored),
            # finished once the pass is done.
            await queue.clear_queue_limit(QUEUE)
            now = int(time.time() * 1000)
            request = ClaimRequest(QUEUE, batch, now, LEASE_MS, "ready")
            running = (await store.job_claim_many(request)).claimed
            found[name] = taken = {}
            for setting, limit in PLANNED.items():
                await queue.clear_queue_limit(QUEUE)
                await queue.set_queue_limit(limit)
                # Timed alone first (its starts are in the rate's window for the plans).
                timed, seconds, failed = await claim()
                await finish(timed)
                with explained(backend) as statements:
                    claimed, _, failed_explained = await claim()
                await finish(claimed)
                taken[setting] = {
                    "claimed": len(claimed),
                    "seconds": seconds,
                    "failed": failed or failed_explained,
                    "statements": statements,
                }
            await finish(running)
    return found
