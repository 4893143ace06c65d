"""``python -m bench --only churn``: high churn without decay (issue 35).

Two measurements on one backend:

- ``rates``: the one-call enqueue, the bulk enqueue and the drain of a ``--jobs`` backlog with no
  finished jobs retained, then after seeding ``--churn-sizes`` finished jobs (in turn, the same
  database growing), each beside the empty figure (``*_change_<rows>``, -0.1 = 10% slower);
  and on a second fresh database empty again (the run's noise) and after seeding
  ``--churn-tombstones`` tombstones of the same queue and tenant.
- ``reads``: every read an operator makes, timed empty and with ``--churn-read-rows`` finished
  jobs: each page the dashboard serves (through the real ASGI application), each read method of
  :class:`~caravel.QueueInspector`, each read-only CLI command (run in this process, so the
  interpreter's start is not in it); median milliseconds of ``CALLS`` calls, the ratio, and
  ``over_2x`` naming those past twice their empty time.

The finished jobs are seeded as ``bench --only counts`` seeds them (one statement: nine in ten
completed, the rest dead letters, finished long ago), the tombstones as ``bench --only
retention`` seeds them. Each measurement removes the live jobs it left (a keyed job left behind
would make the next one's enqueue a duplicate); the drained jobs stay, finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import sqlite3
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID

import httpx
import psycopg
from click.testing import CliRunner

from bench import counts, retention, runs
from bench.apps import QUEUE, Noop, registry
from bench.databases import database, postgres_dsn
from caravel import DatabaseQueue, DispatchOptions, JobState, QueueInspector
from caravel.cli.main import command
from caravel.store.urls import backend_of
from caravel.web import Principal, dashboard
from caravel.web.app import ROUTES
from caravel.web.assets import load_assets

__all__ = ["churn", "rates", "reads"]

#: Calls per read; the median is reported.
CALLS = 5
#: A read slower than this many times its empty time is named in ``over_2x``.
LIMIT = 2.0
#: Where the reads' own jobs live (the finished history is in ``history``, see bench.counts).
READ_QUEUE = "default"
#: GET routes the table cannot time: a replay run lives in the dashboard's memory only.
UNTIMED_ROUTES = {"replay_progress": "a replay run exists only while the dashboard runs it"}


# ----- seeding and clean-up ---------------------------------------------------------------------


def _sql(url: str, *statements: str) -> None:
    if backend_of(url) == "postgresql":
        with psycopg.connect(postgres_dsn(url), autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)  # type: ignore[arg-type]
        return
    with sqlite3.connect(url.removeprefix("sqlite:///")) as lite:
        for statement in statements:
            lite.execute(statement)
        lite.commit()


def _forget_live(url: str) -> None:
    """Delete the bench queue's jobs that are not finished (what an enqueue measurement left)."""
    _sql(url, f"DELETE FROM caravel_jobs WHERE queue = '{QUEUE}' AND available_at IS NOT NULL")


def _seed_finished(url: str, rows: int) -> float:
    """``rows`` finished jobs more, as ``bench --only counts`` seeds them: the seconds it took."""
    started = time.perf_counter()
    if rows > 0:
        counts._load(url, counts._finished(rows))
    return time.perf_counter() - started


# ----- rates ------------------------------------------------------------------------------------

RATES = ("enqueue", "bulk", "drain")


def _rates_once(url: str, jobs: int, single: int, concurrency: int) -> dict[str, float]:
    drained = asyncio.run(runs.drain(url, jobs, concurrency))
    one = asyncio.run(runs.enqueue_single(url, single))
    _forget_live(url)
    bulk = asyncio.run(runs.enqueue_bulk(url, jobs))
    _forget_live(url)
    return {
        "enqueue": one["jobs_per_second"],
        "bulk": bulk["jobs_per_second"],
        "drain": drained["jobs_per_second"],
    }


def _rates(url: str, jobs: int, single: int, concurrency: int, runs_: int) -> dict[str, Any]:
    measured = [_rates_once(url, jobs, single, concurrency) for _ in range(runs_)]
    return {
        f"{rate}_jobs_per_second": statistics.median(m[rate] for m in measured) for rate in RATES
    } | {f"{rate}_runs": [round(m[rate]) for m in measured] for rate in RATES}


def rates(
    backend: str,
    sizes: list[int],
    tombstones: int,
    jobs: int,
    single: int,
    concurrency: int,
    runs_: int,
    *,
    stops: tuple[int, ...] = (),
    between: Callable[[str, int], None] | None = None,
) -> dict[str, Any]:
    """The three rates at 0 and each of ``sizes`` finished jobs (one database, growing), and on
    a second database at 0 and ``tombstones`` tombstones. The database also grows to each of
    ``stops`` (no rates there), and ``between(url, rows)`` runs at each size and stop before
    its rates (the reads, say)."""
    stages: dict[str, dict[str, Any]] = {}
    seeded = 0
    with database(backend) as url:
        for rows in sorted({0, *sizes, *stops}):
            seconds = _seed_finished(url, rows - seeded)
            seeded = rows
            print(f"  churn: {rows:,} finished rows ({seconds:.0f} s to seed)", flush=True)
            if between is not None:
                between(url, rows)
            if rows not in (0, *sizes):
                continue
            stages[f"finished_{rows}"] = {"seed_seconds": seconds, **_rates(
                url, jobs, single, concurrency, runs_
            )}  # fmt: skip
            print(f"  churn rates at {rows:,} finished: {_shown(stages[f'finished_{rows}'])}")
    with database(backend) as url:
        stages["empty_again"] = _rates(url, jobs, single, concurrency, runs_)
        started = time.perf_counter()
        retention.seed(url, "tombstone", tombstones)
        stages[f"tombstones_{tombstones}"] = {
            "seed_seconds": time.perf_counter() - started,
            **_rates(url, jobs, single, concurrency, runs_),
        }
    empty = stages["finished_0"]
    for name, stage in stages.items():
        if name == "finished_0":
            continue
        for rate in RATES:
            key = f"{rate}_jobs_per_second"
            stage[f"{rate}_change"] = stage[key] / empty[key] - 1
    return {"jobs": jobs, "single": single, "concurrency": concurrency, "stages": stages}


def _shown(stage: dict[str, Any]) -> str:
    return ", ".join(f"{rate} {stage[f'{rate}_jobs_per_second']:,.0f}/s" for rate in RATES)


# ----- reads ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fixtures:
    """What the reads name: a job, a dead letter, a batch, a chain, a queue."""

    job_id: UUID
    dead_id: UUID
    batch_id: UUID
    chain_id: UUID


async def _fixtures(url: str) -> Fixtures:
    """A few real jobs of ``READ_QUEUE``, a batch, a chain, a worker that drained some jobs,
    and a paused queue and a limit, so every read has something to find."""
    await runs.drain(url, 10, 10)  # a worker row and completed jobs of the bench queue
    dispatch = DispatchOptions(queue=READ_QUEUE, tenant_id="bench")
    async with DatabaseQueue(url, registry) as queue:
        job = await queue.enqueue(Noop(1), dispatch)
        batch = await queue.enqueue_batch([(Noop(i), dispatch) for i in range(3)])
        chain = await queue.enqueue_chain([(Noop(i), dispatch) for i in range(2)])
        await queue.pause_queue("paused")
    return Fixtures(job.job_id, _first_dead(url), batch.batch_id, chain.chain_id)


def _first_dead(url: str) -> UUID:
    """One dead letter's id (seeded with the live jobs)."""
    sql = "SELECT id FROM caravel_jobs WHERE state = 'dead_letter' LIMIT 1"
    if backend_of(url) == "postgresql":
        with psycopg.connect(postgres_dsn(url), autocommit=True) as conn:
            row = conn.execute(sql).fetchone()
    else:
        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as lite:
            row = lite.execute(sql).fetchone()
    assert row is not None
    return UUID(str(row[0]))


def _seed_reads(url: str) -> Fixtures:
    """The live jobs of ``bench --only counts``, one dead letter, and :func:`_fixtures`."""
    counts._load(url, counts._LIVE)
    counts._load(url, (("history", "dead_letter", 1, "x", "NULL", "NULL", "2"),))
    return asyncio.run(_fixtures(url))


def _paths(f: Fixtures) -> dict[str, str]:
    """Each GET route of the dashboard as the table requests it, by route name."""
    job = f"?queue={READ_QUEUE}&tenant=bench"
    asset = sorted(load_assets())[0]
    params = {
        "job_id": str(f.job_id),
        "queue": READ_QUEUE,
        "name": "nightly",
        "batch_id": str(f.batch_id),
        "run_id": "0",
    }
    queries = {
        "jobs": "",
        "job": job,
        "replay_one_confirm": f"?queue=history&tenant=bench",
        "cancel_one_confirm": job,
        "delete_one_confirm": job,
        "cancel_matching_confirm": f"?queue={READ_QUEUE}",
        "delete_matching_confirm": f"?queue={READ_QUEUE}&state=completed",
        "replay_selection_confirm": "?queue=history",
    }
    found = {}
    for route in ROUTES:
        if route.method != "GET" or route.name in UNTIMED_ROUTES:
            continue
        path = route.path.replace("{name}", asset if route.name == "static" else "{name}")
        for key, value in params.items():
            if route.name == "replay_one_confirm" and key == "job_id":
                value = str(f.dead_id)
            path = path.replace("{" + key + "}", value)
        found[route.name] = path + queries.get(route.name, "")
    found["jobs_dead_letters_filter"] = "/jobs?state=dead_letter"
    found["jobs_oldest_first"] = "/jobs?order=oldest"
    return found


def _operator(request: Any) -> Principal:
    return Principal.operator("bench")


async def _median_ms(call: Callable[[], Awaitable[Any]], calls: int) -> float:
    await call()  # warm: connections, statement caches, the page's template
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        await call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


async def _dashboard_reads(url: str, f: Fixtures, calls: int) -> dict[str, Any]:
    app = dashboard(url, authorize=_operator, refresh_seconds=0)
    timed: dict[str, Any] = {}
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            for name, path in _paths(f).items():
                status = (await client.get(path)).status_code

                async def get(path: str = path) -> None:
                    await client.get(path)

                timed[f"page {name}"] = {"ms": await _median_ms(get, calls), "status": status}
    finally:
        await app.close()
    return timed


async def _inspector_reads(url: str, f: Fixtures, calls: int) -> dict[str, Any]:
    q, t = READ_QUEUE, "bench"
    reads: dict[str, Callable[[QueueInspector], Awaitable[Any]]] = {
        "check_schema": lambda r: r.check_schema(),
        "get_status": lambda r: r.get_status(f.job_id, q, t),
        "get_attempts": lambda r: r.get_attempts(f.dead_id, "history", t),
        "get_payload": lambda r: r.get_payload(f.job_id, q, t),
        "get_result": lambda r: r.get_result(f.job_id, q, t),
        "queue_counts": lambda r: r.queue_counts(),
        "queue_counts(history)": lambda r: r.queue_counts("history"),
        "paused_queues": lambda r: r.paused_queues(),
        "queue_limits": lambda r: r.queue_limits(),
        "queue_limit_usage": lambda r: r.queue_limit_usage(),
        "list_schedules": lambda r: r.list_schedules(),
        "list_jobs": lambda r: r.list_jobs(),
        "list_jobs(oldest_first)": lambda r: r.list_jobs(oldest_first=True),
        "list_jobs(queue)": lambda r: r.list_jobs(queue=q),
        "list_jobs(dead_letter)": lambda r: r.list_jobs(state=JobState.DEAD_LETTER),
        "list_jobs(tenant)": lambda r: r.list_jobs(tenant_id=t),
        "list_jobs_with_last_attempt(dead_letter)": lambda r: r.list_jobs_with_last_attempt(
            state=JobState.DEAD_LETTER
        ),
        "list_batches": lambda r: r.list_batches(),
        "get_batch": lambda r: r.get_batch(f.batch_id),
        "get_chain": lambda r: r.get_chain(f.chain_id),
        "find_job": lambda r: r.find_job(f.job_id),
        "throughput": lambda r: r.throughput(),
        "throughput(24h hourly)": lambda r: r.throughput(
            window=timedelta(hours=24), bucket=timedelta(hours=1)
        ),
        "scaling_signal": lambda r: r.scaling_signal(),
        "scaling_signal(queue)": lambda r: r.scaling_signal(q),
        "list_workers": lambda r: r.list_workers(),
    }
    timed: dict[str, Any] = {}
    async with QueueInspector(url) as reader:
        for name, read in reads.items():

            async def call(read: Callable[[QueueInspector], Awaitable[Any]] = read) -> None:
                await read(reader)

            timed[f"inspector {name}"] = {"ms": await _median_ms(call, calls)}
    return timed


def cli_reads(f: Fixtures) -> dict[str, list[str]]:
    """Each CLI command that only reads (and the removals' dry runs), as the table runs it."""
    return {
        "status": ["status"],
        "workers": ["workers"],
        "metrics": ["metrics"],
        "db current": ["db", "current"],
        "db check": ["db", "check"],
        "jobs list": ["jobs", "list"],
        "jobs list --state dead_letter": ["jobs", "list", "--state", "dead_letter"],
        "jobs show": ["jobs", "show", str(f.job_id), "--queue", READ_QUEUE],
        "queues list": ["queues", "list"],
        "queues limits show": ["queues", "limits", "show"],
        "schedules list": ["schedules", "list"],
        "batches list": ["batches", "list"],
        "batches show": ["batches", "show", str(f.batch_id)],
        "chains show": ["chains", "show", str(f.chain_id)],
        "jobs cancel --dry-run": ["jobs", "cancel", "--queue", READ_QUEUE, "--dry-run"],
        "jobs delete --dry-run": [
            "jobs", "delete", "--queue", READ_QUEUE, "--state", "completed", "--dry-run",
        ],  # fmt: skip
    }


def _cli_reads(url: str, f: Fixtures, calls: int) -> dict[str, Any]:
    tree = command()
    runner = CliRunner()
    timed: dict[str, Any] = {}
    for name, argv in cli_reads(f).items():
        full = [*argv, "--url", url]
        first = runner.invoke(tree, full)
        times = []
        for _ in range(calls):
            started = time.perf_counter()
            runner.invoke(tree, full)
            times.append((time.perf_counter() - started) * 1000)
        timed[f"cli {name}"] = {"ms": statistics.median(times), "exit_code": first.exit_code}
        if first.exit_code != 0:
            timed[f"cli {name}"]["output"] = first.output[-300:]
    return timed


def _reads_at(url: str, f: Fixtures, calls: int) -> dict[str, Any]:
    with contextlib.redirect_stdout(io.StringIO()):
        found = asyncio.run(_dashboard_reads(url, f, calls))
        found.update(asyncio.run(_inspector_reads(url, f, calls)))
    found.update(_cli_reads(url, f, calls))
    return found


def reads(empty: dict[str, Any], full: dict[str, Any]) -> dict[str, Any]:
    """Each read's empty and full milliseconds and their ratio."""
    table = {}
    for name, before in empty.items():
        after = full[name]
        row = {"empty_ms": before["ms"], "full_ms": after["ms"], "ratio": after["ms"] / before["ms"]}
        row.update({k: v for k, v in after.items() if k != "ms"})
        table[name] = row
    return table


def churn(
    backend: str,
    sizes: list[int],
    read_rows: int,
    tombstones: int,
    jobs: int,
    single: int,
    concurrency: int,
    runs_: int,
    calls: int = CALLS,
) -> dict[str, Any]:
    """The rates (see :func:`rates`) and the read table: the reads are timed in the rates'
    database before its first rates (empty) and once it holds ``read_rows`` finished jobs
    (the database grows to it between two of ``sizes``)."""
    taken: dict[str, Any] = {}
    fixtures: list[Fixtures] = []

    def between(url: str, rows: int) -> None:
        if rows == 0:
            fixtures.append(_seed_reads(url))
            taken["empty"] = _reads_at(url, fixtures[0], calls)
            print(f"  churn reads timed empty ({len(taken['empty'])} reads)", flush=True)
        if rows == read_rows:
            taken["full"] = _reads_at(url, fixtures[0], calls)
            print(f"  churn reads timed at {rows:,} finished", flush=True)

    measured = rates(
        backend,
        sizes,
        tombstones,
        jobs,
        single,
        concurrency,
        runs_,
        stops=(read_rows,),
        between=between,
    )
    table = reads(taken["empty"], taken["full"])
    return {
        **measured,
        "read_rows": read_rows,
        "read_calls": calls,
        "reads": table,
        "over_2x": sorted(name for name, row in table.items() if row["ratio"] > LIMIT),
        "untimed_routes": UNTIMED_ROUTES,
    }
