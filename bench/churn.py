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
would make the next one's enqueue a duplicate), and each stage on both databases the jobs it
drained, so the two differ by the retained history alone.
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
from caravel import DatabaseQueue, DispatchOptions, JobState, QueueInspector, Workflow
from caravel.cli.main import command
from caravel.store.urls import backend_of
from caravel.web import Principal, dashboard
from caravel.web.app import ROUTES
from caravel.web.assets import load_assets

__all__ = ["churn", "cli_reads", "rates"]

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


def _forget_bench(url: str) -> None:
    """Delete every job of the bench queue (what the rates left in the empty twin)."""
    _sql(url, f"DELETE FROM caravel_jobs WHERE queue = '{QUEUE}'")
    if backend_of(url) == "postgresql":
        _sql(url, "VACUUM ANALYZE caravel_jobs")


def _rates(
    empty: str, full: str, jobs: int, single: int, concurrency: int, runs_: int
) -> dict[str, Any]:
    """The rates on ``full`` and on the empty twin ``empty``, the runs alternating (so other
    work on the machine weighs on both alike); the twin emptied again afterwards."""
    measured: dict[str, list[dict[str, float]]] = {"empty": [], "full": []}
    for _ in range(runs_):
        measured["empty"].append(_rates_once(empty, jobs, single, concurrency))
        measured["full"].append(_rates_once(full, jobs, single, concurrency))
    # Both lose the bench queue's jobs again, the drained ones too: what differs between the
    # two is then the retained history alone.
    _forget_bench(empty)
    _forget_bench(full)
    found: dict[str, Any] = {}
    for rate in RATES:
        for side, runs_measured in measured.items():
            median = statistics.median(m[rate] for m in runs_measured)
            found[f"{rate}_jobs_per_second" + ("" if side == "full" else "_empty")] = median
            found[f"{rate}_runs" + ("" if side == "full" else "_empty")] = [
                round(m[rate]) for m in runs_measured
            ]
        found[f"{rate}_change"] = (
            found[f"{rate}_jobs_per_second"] / found[f"{rate}_jobs_per_second_empty"] - 1
        )
    return found


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
    between: Callable[[str, str, int], None] | None = None,
) -> dict[str, Any]:
    """The three rates at 0 and each of ``sizes`` finished jobs (one database, growing), and on
    a third database after seeding ``tombstones`` tombstones, each beside the same rates on an
    empty twin measured in turn with them (``*_change``: -0.1 is 10% slower). The database also
    grows to each of ``stops`` (no rates there), and ``between(empty, full, rows)`` runs at
    each size and stop before its rates (the reads, say)."""
    stages: dict[str, dict[str, Any]] = {}
    seeded = 0
    with database(backend) as empty, database(backend) as url:
        for rows in sorted({0, *sizes, *stops}):
            seconds = _seed_finished(url, rows - seeded)
            seeded = rows
            print(f"  churn: {rows:,} finished rows ({seconds:.0f} s to seed)", flush=True)
            if between is not None:
                between(empty, url, rows)
            if rows not in (0, *sizes):
                continue
            stages[f"finished_{rows}"] = {"seed_seconds": seconds, **_rates(
                empty, url, jobs, single, concurrency, runs_
            )}  # fmt: skip
            print(f"  churn rates at {rows:,} finished: {_shown(stages[f'finished_{rows}'])}")
        with database(backend) as kept:
            started = time.perf_counter()
            retention.seed(kept, "tombstone", tombstones)
            name = f"tombstones_{tombstones}"
            stages[name] = {
                "seed_seconds": time.perf_counter() - started,
                **_rates(empty, kept, jobs, single, concurrency, runs_),
            }
            print(f"  churn rates at {tombstones:,} tombstones: {_shown(stages[name])}")
    return {"jobs": jobs, "single": single, "concurrency": concurrency, "stages": stages}


def _shown(stage: dict[str, Any]) -> str:
    return ", ".join(
        f"{rate} {stage[f'{rate}_jobs_per_second']:,.0f}/s ({stage[f'{rate}_change']:+.1%})"
        for rate in RATES
    )


# ----- reads ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fixtures:
    """What the reads name: a job, a dead letter, a batch, a chain, a workflow, a queue."""

    job_id: UUID
    dead_id: UUID
    batch_id: UUID
    chain_id: UUID
    workflow_id: UUID


async def _fixtures(url: str) -> Fixtures:
    """A few real jobs of ``READ_QUEUE``, a batch, a chain, a workflow (a fan-out of three into
    one step), a worker that drained some jobs, and a paused queue and a limit, so every read
    has something to find."""
    await runs.drain(url, 10, 10)  # a worker row and completed jobs of the bench queue
    dispatch = DispatchOptions(queue=READ_QUEUE, tenant_id="bench")
    async with DatabaseQueue(url, registry) as queue:
        job = await queue.enqueue(Noop(1), dispatch)
        batch = await queue.enqueue_batch([(Noop(i), dispatch) for i in range(3)])
        chain = await queue.enqueue_chain([(Noop(i), dispatch) for i in range(2)])
        graph = Workflow("bench", tenant_id="bench")
        graph.add_many("parts", [Noop(i) for i in range(3)], options=dispatch)
        graph.add("sum", Noop(3), after=["parts"], options=dispatch)
        workflow = await queue.enqueue_workflow(graph)
        await queue.pause_queue("paused")
    return Fixtures(
        job.job_id, _first_dead(url), batch.batch_id, chain.chain_id, workflow.workflow_id
    )


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


#: Dead letters seeded beside the live jobs: a full page of the listings (50) and one more, so
#: a dead-letter page holds as many rows on the empty database as on the loaded one and the
#: ratio is the history's alone.
SEEDED_DEAD = 51


def _seed_reads(url: str) -> Fixtures:
    """The live jobs of ``bench --only counts``, :data:`SEEDED_DEAD` dead letters, and
    :func:`_fixtures`."""
    counts._load(url, counts._LIVE)
    counts._load(url, (("history", "dead_letter", SEEDED_DEAD, "x", "NULL", "NULL", "2"),))
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
        "workflow_id": str(f.workflow_id),
        "run_id": "0",
    }
    queries = {
        "jobs": "",
        "job": job,
        "replay_one_confirm": "?queue=history&tenant=bench",
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


#: One read of one database: it answers an HTTP status, a CLI exit code, or ``None``.
Read = Callable[[], Awaitable[int | None]]
SIDES = ("empty", "full")


async def _dashboard_reads(
    url: str, f: Fixtures, stack: contextlib.AsyncExitStack
) -> dict[str, Read]:
    app = dashboard(url, authorize=_operator, refresh_seconds=0)
    stack.push_async_callback(app.close)
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    client = httpx.AsyncClient(transport=transport, base_url="http://localhost")
    await stack.enter_async_context(client)
    found: dict[str, Read] = {}
    for name, path in _paths(f).items():

        async def get(path: str = path) -> int:
            return (await client.get(path)).status_code

        found[f"page {name}"] = get
    return found


async def _inspector_reads(
    url: str, f: Fixtures, stack: contextlib.AsyncExitStack
) -> dict[str, Read]:
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
        "list_workflows": lambda r: r.list_workflows(),
        "get_workflow": lambda r: r.get_workflow(f.workflow_id),
        "find_job": lambda r: r.find_job(f.job_id),
        "throughput": lambda r: r.throughput(),
        "throughput(24h hourly)": lambda r: r.throughput(
            window=timedelta(hours=24), bucket=timedelta(hours=1)
        ),
        "scaling_signal": lambda r: r.scaling_signal(),
        "scaling_signal(queue)": lambda r: r.scaling_signal(q),
        "list_workers": lambda r: r.list_workers(),
    }
    reader = await stack.enter_async_context(QueueInspector(url))
    found: dict[str, Read] = {}
    for name, read in reads.items():

        async def call(read: Callable[[QueueInspector], Awaitable[Any]] = read) -> None:
            await read(reader)

        found[f"inspector {name}"] = call
    return found


async def _alternate(sides: dict[str, dict[str, Read]], calls: int) -> dict[str, Any]:
    """Each read on each side in turn, ``calls`` times (after one call to warm connections,
    statement caches and templates): per read and side, the median milliseconds and what the
    first call answered."""
    timed: dict[str, Any] = {}
    for name in sides["empty"]:
        row: dict[str, Any] = {}
        times: dict[str, list[float]] = {side: [] for side in sides}
        for side, reads_ in sides.items():
            row[f"{side}_answer"] = await reads_[name]()
        for _ in range(calls):
            for side, reads_ in sides.items():
                started = time.perf_counter()
                await reads_[name]()
                times[side].append((time.perf_counter() - started) * 1000)
        for side in sides:
            row[f"{side}_ms"] = statistics.median(times[side])
        timed[name] = row
    return timed


async def _async_reads(
    urls: dict[str, str], fixtures: dict[str, Fixtures], calls: int
) -> dict[str, Any]:
    async with contextlib.AsyncExitStack() as stack:
        sides = {}
        for side, url in urls.items():
            sides[side] = {
                **await _dashboard_reads(url, fixtures[side], stack),
                **await _inspector_reads(url, fixtures[side], stack),
            }
        return await _alternate(sides, calls)


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
        "workflows list": ["workflows", "list"],
        "workflows show": ["workflows", "show", str(f.workflow_id)],
        "workflows cancel --dry-run": ["workflows", "cancel", str(f.workflow_id), "--dry-run"],
        "jobs cancel --dry-run": ["jobs", "cancel", "--queue", READ_QUEUE, "--dry-run"],
        "jobs delete --dry-run": [
            "jobs",
            "delete",
            "--queue",
            READ_QUEUE,
            "--state",
            "completed",
            "--dry-run",
        ],
    }


def _cli_reads(urls: dict[str, str], fixtures: dict[str, Fixtures], calls: int) -> dict[str, Any]:
    """The CLI reads, in this process, on each side in turn (as :func:`_alternate`)."""
    tree = command()
    runner = CliRunner()
    timed: dict[str, Any] = {}
    commands = {side: cli_reads(fixtures[side]) for side in urls}
    for name in commands["empty"]:
        row: dict[str, Any] = {}
        times: dict[str, list[float]] = {side: [] for side in urls}
        argv = {side: [*commands[side][name], "--url", url] for side, url in urls.items()}
        for side in urls:
            first = runner.invoke(tree, argv[side])
            row[f"{side}_answer"] = first.exit_code
            if first.exit_code != 0:
                row[f"{side}_output"] = first.output[-300:]
        for _ in range(calls):
            for side in urls:
                started = time.perf_counter()
                runner.invoke(tree, argv[side])
                times[side].append((time.perf_counter() - started) * 1000)
        for side in urls:
            row[f"{side}_ms"] = statistics.median(times[side])
        timed[f"cli {name}"] = row
    return timed


def _reads_at(urls: dict[str, str], fixtures: dict[str, Fixtures], calls: int) -> dict[str, Any]:
    with contextlib.redirect_stdout(io.StringIO()):
        found = asyncio.run(_async_reads(urls, fixtures, calls))
    found.update(_cli_reads(urls, fixtures, calls))
    for row in found.values():
        row["ratio"] = row["full_ms"] / row["empty_ms"]
    return found


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
    """The rates (see :func:`rates`) and the read table: each read timed on the rates' database
    once it holds ``read_rows`` finished jobs (it grows to that between two of ``sizes``) and
    on its empty twin, in turn (``ratio``: full over empty). Both hold the same few live jobs,
    batch, chain and worker."""
    table: dict[str, Any] = {}
    fixtures: dict[str, Fixtures] = {}

    def between(empty: str, full: str, rows: int) -> None:
        urls = {"empty": empty, "full": full}
        if rows == 0:
            fixtures.update({side: _seed_reads(url) for side, url in urls.items()})
        if rows == read_rows:
            table.update(_reads_at(urls, fixtures, calls))
            print(f"  churn: {len(table)} reads timed at {rows:,} finished", flush=True)
            for name, row in table.items():
                print(f"    {name:48} {row['empty_ms']:9.2f} {row['full_ms']:9.2f} ms"
                      f" {row['ratio']:6.2f}x", flush=True)  # fmt: skip

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
    return {
        **measured,
        "read_rows": read_rows,
        "read_calls": calls,
        "reads": table,
        "over_2x": sorted(name for name, row in table.items() if row["ratio"] > LIMIT),
        "untimed_routes": UNTIMED_ROUTES,
    }
