"""What an enqueue costs, Caravel against pgqueuer: jobs per second, and the CPU each job takes
in the producer (``time.process_time``) and in the PostgreSQL backends serving it (their
``utime + stime`` from ``/proc``). One call per job, and bulk enqueue in batches, every job with
its own idempotency key (pgqueuer's ``dedupe_key``), each run on a fresh database. The one call
per job is measured awaited on ``DatabaseQueue`` and called on ``SyncQueue`` (whose one-job
enqueue runs on the caller's thread).

Bulk enqueue is also set against a bare binary COPY of the same rows (``copy_bulk``), the floor
of what any insert into the table can cost.

Run it with ``python -m bench.enqueue_cost [jobs] [bulk_jobs] [rounds] [only]``: the runs of
each kind (those whose name holds ``only``, e.g. ``bulk``; all by default) are interleaved, peer
by peer, and the figures are their medians.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy.engine import make_url

from bench.apps import Noop, registry
from bench.databases import ADMIN_URL, database, postgres_dsn
from caravel import DatabaseQueue, DispatchOptions, QueueOptions, SyncQueue
from caravel.preparation import prepare_jobs
from caravel.store.postgresql.insert_statements import COPY_SQL, COPY_TYPES, copy_row

QUEUE = "bench"
_TICK = os.sysconf("SC_CLK_TCK")

Body = Callable[[str, int, int], Coroutine[Any, Any, dict[str, float]]]


def _cpu_seconds(pid: int) -> float:
    """A process's user and system CPU so far, or 0 once it has gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime and stime (fields 14 and 15)


def _server_cpu(url: str) -> dict[int, float]:
    """CPU so far of every backend connected to ``url``'s database, by pid."""
    name = make_url(url).database
    with psycopg.connect(postgres_dsn(ADMIN_URL), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        ).fetchall()
    return {pid: _cpu_seconds(pid) for (pid,) in rows}


async def _timed(url: str, jobs: int, body: Callable[[], Awaitable[None]]) -> dict[str, float]:
    """``body`` run once over connections already open (a warm-up came first): its rate and
    its CPU per job, the producer's and that of the backends (those open at the end; the
    queues under test keep theirs), and the collections of the collector's oldest generation
    it ran (each a walk of every object in the process)."""
    # Each run starts with the collector's generations empty, so that no run pays for the
    # garbage of those before it (nor the first, for the imports' leftovers).
    gc.collect()
    server_before = _server_cpu(url)
    cpu_before, started = time.process_time(), time.perf_counter()
    full_before = gc.get_stats()[2]["collections"]
    await body()
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_before
    full = gc.get_stats()[2]["collections"] - full_before
    server_after = _server_cpu(url)
    server = sum(after - server_before.get(pid, 0.0) for pid, after in server_after.items())
    return {
        "jobs_per_second": jobs / elapsed,
        "producer_cpu_ms_per_job": cpu / jobs * 1000,
        "server_cpu_ms_per_job": server / jobs * 1000,
        "total_cpu_ms_per_job": (cpu + server) / jobs * 1000,
        "server_backends": len(server_after),
        "full_collections": full,
    }


def _dispatch(key: str) -> DispatchOptions:
    return DispatchOptions(queue=QUEUE, tenant_id="bench", idempotency_key=key)


async def caravel_single(url: str, jobs: int, batch: int = 1) -> dict[str, float]:
    """``DatabaseQueue.enqueue`` once per job, a key per job, as bench/runs.py does."""
    async with DatabaseQueue(url, registry) as queue:
        await queue.enqueue(Noop(-1), _dispatch("warm-up"))

        async def body() -> None:
            for i in range(jobs):
                await queue.enqueue(Noop(i), _dispatch(f"key-{i}"))

        return await _timed(url, jobs, body)


async def caravel_sync_single(url: str, jobs: int, batch: int = 1) -> dict[str, float]:
    """``SyncQueue.enqueue`` once per job, a key per job: the synchronous caller's cost (its
    queue's own thread included)."""
    with SyncQueue(url, registry) as queue:
        queue.enqueue(Noop(-1), _dispatch("warm-up"))

        async def body() -> None:
            for i in range(jobs):
                queue.enqueue(Noop(i), _dispatch(f"key-{i}"))

        return await _timed(url, jobs, body)


async def caravel_bulk(url: str, jobs: int, batch: int) -> dict[str, float]:
    """``DatabaseQueue.enqueue_many`` in batches of ``batch``, a key per job."""
    async with DatabaseQueue(url, registry) as queue:
        await queue.enqueue(Noop(-1), _dispatch("warm-up"))

        async def body() -> None:
            for start in range(0, jobs, batch):
                items = range(start, min(jobs, start + batch))
                await queue.enqueue_many([(Noop(i), _dispatch(f"key-{i}")) for i in items])

        return await _timed(url, jobs, body)


async def copy_bulk(url: str, jobs: int, batch: int) -> dict[str, float]:
    """The floor under ``caravel_bulk``: psycopg's binary COPY of the very rows Caravel writes
    (its columns, its values: prepared by Caravel before the timed part), in batches of
    ``batch``, one transaction and one COPY each, committed durably as Caravel's are. No
    validation, no serialization, no key probe, no NOTIFY: only sending the rows and the
    server inserting them."""
    items = [(Noop(i), _dispatch(f"key-{i}")) for i in range(jobs)]
    rows = [copy_row(job) for job in prepare_jobs(registry, QueueOptions(), items, 0)]
    conn = await psycopg.AsyncConnection.connect(postgres_dsn(url))
    try:
        # Warm-up as the others: the connection's first COPY (and its type look-ups) untimed.
        warm = prepare_jobs(registry, QueueOptions(), [(Noop(-1), _dispatch("warm-up"))], 0)
        async with conn.transaction(), conn.cursor() as cursor, cursor.copy(COPY_SQL) as copy:
            copy.set_types(COPY_TYPES)
            await copy.write_row(copy_row(warm[0]))

        async def body() -> None:
            for start in range(0, jobs, batch):
                async with (
                    conn.transaction(),
                    conn.cursor() as cursor,
                    cursor.copy(COPY_SQL) as copy,
                ):
                    copy.set_types(COPY_TYPES)
                    for row in rows[start : start + batch]:
                        await copy.write_row(row)

        return await _timed(url, jobs, body)
    finally:
        await conn.close()


async def _pgqueuer(url: str, jobs: int, batch: int) -> dict[str, float]:
    from pgqueuer import PsycopgDriver, Queries

    conn = await psycopg.AsyncConnection.connect(postgres_dsn(url), autocommit=True)
    try:
        queries = Queries(PsycopgDriver(conn))
        await queries.install()
        await queries.enqueue("noop", b"-1", dedupe_key="warm-up")

        async def single() -> None:
            for i in range(jobs):
                await queries.enqueue("noop", f"{i}".encode(), dedupe_key=f"single-{i}")

        async def bulk() -> None:
            for first in range(0, jobs, batch):
                count = min(batch, jobs - first)
                await queries.enqueue(
                    ["noop"] * count,
                    [f"{first + n}".encode() for n in range(count)],
                    [0] * count,
                    dedupe_key=[f"bulk-{first + n}" for n in range(count)],
                )

        return await _timed(url, jobs, single if batch == 1 else bulk)
    finally:
        await conn.close()


async def pgqueuer_single(url: str, jobs: int, batch: int = 1) -> dict[str, float]:
    """pgqueuer's ``Queries.enqueue`` once per job with a ``dedupe_key`` (as its adapter in
    bench/adapters does)."""
    return await _pgqueuer(url, jobs, 1)


async def pgqueuer_bulk(url: str, jobs: int, batch: int) -> dict[str, float]:
    """pgqueuer's ``Queries.enqueue`` with lists of ``batch`` jobs, a ``dedupe_key`` each."""
    return await _pgqueuer(url, jobs, batch)


RUNS: dict[str, Body] = {
    "caravel_single": caravel_single,
    "caravel_sync_single": caravel_sync_single,
    "pgqueuer_single": pgqueuer_single,
    "caravel_bulk": caravel_bulk,
    "pgqueuer_bulk": pgqueuer_bulk,
    "copy_bulk": copy_bulk,
}


def _one(run: Body, jobs: int, batch: int) -> dict[str, float]:
    with database("postgresql") as url:
        return asyncio.run(run(url, jobs, batch))


def _ratio(medians: dict[str, dict[str, float]], run: str, peer: str) -> float | None:
    if run not in medians or peer not in medians:
        return None
    return round(medians[run]["jobs_per_second"] / medians[peer]["jobs_per_second"], 3)


def measure(
    jobs: int = 3000,
    bulk_jobs: int = 20_000,
    batch: int = 1000,
    rounds: int = 3,
    only: str = "",
) -> dict[str, Any]:
    """Every run of :data:`RUNS` (those whose name holds ``only``) ``rounds`` times, interleaved,
    each on a fresh database: the medians of each figure, Caravel's bulk rate against
    pgqueuer's and the bare COPY's, the runs themselves, and the machine's load before and
    after."""
    runs = {name: run for name, run in RUNS.items() if only in name}
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in runs}
    load_before = Path("/proc/loadavg").read_text().strip()
    for _ in range(rounds):
        for name, run in runs.items():
            single = name.endswith("single")
            samples[name].append(_one(run, jobs if single else bulk_jobs, 1 if single else batch))
    medians = {
        name: {key: statistics.median(s[key] for s in runs) for key in runs[0]}
        for name, runs in samples.items()
    }
    return {
        "jobs": jobs,
        "bulk_jobs": bulk_jobs,
        "batch": batch,
        "rounds": rounds,
        "loadavg_before": load_before,
        "loadavg_after": Path("/proc/loadavg").read_text().strip(),
        "medians": medians,
        "bulk_rate_ratios": {
            "caravel_to_pgqueuer": _ratio(medians, "caravel_bulk", "pgqueuer_bulk"),
            "caravel_to_copy": _ratio(medians, "caravel_bulk", "copy_bulk"),
        },
        "runs": samples,
    }


if __name__ == "__main__":
    numbers = [int(a) for a in sys.argv[1:4]]
    keys = ("jobs", "bulk_jobs", "rounds")
    only = sys.argv[4] if len(sys.argv) > 4 else ""
    print(json.dumps(measure(**dict(zip(keys, numbers, strict=False)), only=only), indent=2))
