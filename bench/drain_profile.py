"""Where the drain's CPU goes: N no-op jobs drained on PostgreSQL, with the worker's own CPU time
and its PostgreSQL backends' CPU time per job beside the throughput.

With ``--backend mariadb`` (in process only) on MariaDB: the server's share is the CPU time of
the whole ``mariadbd`` process over the drain (one process serves every client, so other work
on the same server counts too), read from ``/proc`` when the server runs on this machine::

    python -m bench.drain_profile --backend mariadb --jobs 20000 --concurrency 1000 --durable

In process (the drain as ``bench.runs.drain`` runs it: fill, then one worker until the last
acknowledgement is written), optionally under cProfile::

    python -m bench.drain_profile --jobs 20000 --concurrency 1000 [--durable] [--profile out.prof]

With ``--processes K``, K ``caravel worker`` subprocesses share one database: they start on an
empty queue, the jobs arrive in one transaction, and the clock runs from its commit to the last
completed job (polled)::

    python -m bench.drain_profile --jobs 20000 --concurrency 500 --processes 2
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import json
import os
import subprocess
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

from bench.apps import Noop, worker_command
from bench.databases import database, mariadb_connect, postgres_dsn
from bench.runs import QUEUE, drain, fill_backlog
from caravel import DatabaseQueue, JobContext, JobRegistry, QueueWorker, WorkerOptions
from caravel.store.urls import backend_of

ROOT = Path(__file__).resolve().parent.parent
_TICK = os.sysconf("SC_CLK_TCK")

_FILL = """
INSERT INTO caravel_jobs (id, queue, job_type, tenant_id, payload, state, attempt,
    max_attempts, due_at, available_at, lease_token, created_at, updated_at)
SELECT gen_random_uuid(), %s, 'bench.noop.v1', 'bench', '{"n":' || g || '}', 'ready', 0, 3,
    1, 1, 0, 1, 1 FROM generate_series(1, %s) AS g
"""


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process, from /proc (0 once it has exited)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def _mariadbd_cpu(url: str) -> float | None:
    """The MariaDB server process's CPU time so far, ``None`` when it is not on this machine
    (its pid file is not readable here)."""
    with contextlib.closing(mariadb_connect(url)) as conn, conn.cursor() as cursor:
        cursor.execute("SELECT @@pid_file")
        row = cursor.fetchone()
    try:
        pid = int(Path(str(row[0])).read_text().strip()) if row else 0
    except (OSError, ValueError):
        return None
    return _cpu_seconds(pid) if pid else None


def _backends(url: str) -> dict[int, float]:
    """CPU time of every other backend connected to the queue's database."""
    with psycopg.connect(postgres_dsn(url), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid()"
        ).fetchall()
    return {pid: _cpu_seconds(pid) for (pid,) in rows}


async def _in_process(
    url: str, n: int, concurrency: int, durable: bool, profile: str | None, freeze: bool
) -> dict[str, Any]:
    done = asyncio.Event()
    seen = 0
    counting = JobRegistry()

    @counting.handles("bench.noop.v1", Noop)
    async def count(job: Noop, ctx: JobContext[None]) -> None:
        nonlocal seen
        seen += 1
        if seen >= n:
            done.set()

    async with DatabaseQueue(url, counting) as filler:
        await fill_backlog(filler, n)
    async with DatabaseQueue(url, counting) as queue:
        options = WorkerOptions(concurrency=concurrency, durable_acks=durable)
        worker = QueueWorker(queue, options=options)
        if freeze:  # as ``caravel worker`` does before it starts
            gc.collect()
            gc.freeze()
        profiler = cProfile.Profile() if profile else None
        maria = backend_of(url) == "mariadb"
        server_before = _mariadbd_cpu(url) if maria else None
        cpu, started = time.process_time(), time.perf_counter()
        if profiler is not None:
            profiler.enable()
        running = asyncio.create_task(worker.run(QUEUE))
        await done.wait()
        worker.stop()
        await running
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(profile)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        if maria:
            server_after = _mariadbd_cpu(url)
            figures: dict[str, Any] = {"seconds": elapsed, "worker_cpu": cpu}
            if server_before is not None and server_after is not None:
                figures["server_cpu"] = server_after - server_before
            await worker.close()
            return figures
        # The drain's backends are all still open (the filler's are gone): their whole CPU time.
        server = sum(_backends(url).values())
        await worker.close()
    return {"seconds": elapsed, "worker_cpu": cpu, "server_cpu": server}


def _completed(url: str) -> int:
    with psycopg.connect(postgres_dsn(url), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM caravel_jobs WHERE state = 'completed' AND queue = %s", (QUEUE,)
        ).fetchone()
    return int(row[0]) if row else 0


def _processes(url: str, n: int, concurrency: int, durable: bool, k: int) -> dict[str, Any]:
    flags = ["--concurrency", str(concurrency), "--poll-interval", "0.01", "--log-level", "warning"]
    command = worker_command(url, *flags, *(["--durable-acks"] if durable else []))
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
    workers = [
        subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
        for _ in range(k)
    ]
    try:
        for worker in workers:
            assert worker.stderr is not None
            worker.stderr.readline()  # "processing ..." once it is up
        time.sleep(0.5)
        before_workers = sum(_cpu_seconds(w.pid) for w in workers)
        before_server = _backends(url)
        with psycopg.connect(postgres_dsn(url), autocommit=True) as conn:
            conn.execute(_FILL, (QUEUE, n))
            started = time.perf_counter()
        while _completed(url) < n:
            time.sleep(0.01)
        elapsed = time.perf_counter() - started
        cpu = sum(_cpu_seconds(w.pid) for w in workers) - before_workers
        after_server = _backends(url)
        server = sum(t - before_server.get(pid, 0.0) for pid, t in after_server.items())
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(timeout=60)
    return {"seconds": elapsed, "worker_cpu": cpu, "server_cpu": server}


# ----- the reference peer, as issue 19 ran it --------------------------------------------------


def _pgqueuer_process(dsn: str, jobs: int, batch: int, ready: Any, go: Any, out: Any) -> None:
    """One pgqueuer process draining with batch ``batch``: when it started and when its last
    handler ran (``time.perf_counter`` is the same clock in every process on Linux)."""

    async def run() -> tuple[float, float, int]:
        from pgqueuer import PsycopgDriver, Queries, QueueManager
        from pgqueuer.models import Job
        from pgqueuer.types import QueueExecutionMode

        conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        manager = QueueManager(Queries(PsycopgDriver(conn)))
        done, last = 0, 0.0

        @manager.entrypoint("noop")
        async def noop(job: Job) -> None:
            nonlocal done, last
            done += 1
            last = time.perf_counter()

        ready.set()
        go.wait()
        started = time.perf_counter()
        await manager.run(
            batch_size=batch, mode=QueueExecutionMode.drain, dequeue_timeout=timedelta(seconds=1)
        )
        await conn.close()
        return started, last, done

    out.put(asyncio.run(run()))


def pgqueuer(n: int, processes: int, batch: int) -> dict[str, Any]:
    """pgqueuer draining ``n`` jobs with ``processes`` processes, from the moment they all start
    to the last handler."""
    import multiprocessing

    from pgqueuer import PsycopgDriver, Queries

    async def fill(dsn: str) -> None:
        conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        queries = Queries(PsycopgDriver(conn))
        await queries.install()
        for first in range(0, n, 1000):
            count = min(1000, n - first)
            await queries.enqueue(
                ["noop"] * count, [f"{first + i}".encode() for i in range(count)], [0] * count
            )
        await conn.close()

    spawn = multiprocessing.get_context("spawn")
    with database("postgresql") as url:
        dsn = postgres_dsn(url)
        asyncio.run(fill(dsn))
        go, out = spawn.Event(), spawn.Queue()
        readies = [spawn.Event() for _ in range(processes)]
        children = [
            spawn.Process(target=_pgqueuer_process, args=(dsn, n, batch, r, go, out))
            for r in readies
        ]
        for child in children:
            child.start()
        for r in readies:
            r.wait()
        go.set()
        results = [out.get(timeout=300) for _ in children]
        for child in children:
            child.join()
    seconds = max(r[1] for r in results) - min(r[0] for r in results)
    assert sum(r[2] for r in results) == n
    return {"peer": "pgqueuer", "jobs": n, "processes": processes, "batch": batch,
            "seconds": seconds, "jobs_per_second": n / seconds}  # fmt: skip


def measure(
    n: int,
    concurrency: int,
    *,
    durable: bool = False,
    processes: int = 0,
    profile: str | None = None,
    through_runs: bool = False,
    freeze: bool = False,
    backend: str = "postgresql",
) -> dict[str, Any]:
    """One drain on a fresh database; ``processes`` 0 means in this process."""
    if backend != "postgresql" and processes:
        raise ValueError("--processes drains on PostgreSQL only")
    with database(backend) as url:
        if through_runs:
            result = asyncio.run(drain(url, n, concurrency, durable_acks=durable))
            figures: dict[str, Any] = {"seconds": result["seconds"]}
        elif processes:
            figures = _processes(url, n, concurrency, durable, processes)
        else:
            figures = asyncio.run(_in_process(url, n, concurrency, durable, profile, freeze))
    figures["jobs_per_second"] = n / figures["seconds"]
    for side in ("worker_cpu", "server_cpu"):
        if side in figures:
            figures[f"{side}_us_per_job"] = figures[side] / n * 1e6
    found = {"backend": backend, "jobs": n, "concurrency": concurrency, "durable": durable}
    return {**found, **figures}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=("postgresql", "mariadb"), default="postgresql")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=1000)
    parser.add_argument("--durable", action="store_true")
    parser.add_argument("--processes", type=int, default=0)
    parser.add_argument("--profile")
    parser.add_argument("--freeze", action="store_true", help="freeze the heap first")
    parser.add_argument("--pgqueuer-batch", type=int, help="measure pgqueuer instead")
    parser.add_argument("--runs-drain", action="store_true", help="time bench.runs.drain itself")
    args = parser.parse_args()
    if args.pgqueuer_batch:
        peer = pgqueuer(args.jobs, args.processes or 1, args.pgqueuer_batch)
        print(json.dumps({**peer, "loadavg": Path("/proc/loadavg").read_text().split()[0]}))
        return
    result = measure(
        args.jobs,
        args.concurrency,
        durable=args.durable,
        processes=args.processes,
        profile=args.profile,
        through_runs=args.runs_drain,
        freeze=args.freeze,
        backend=args.backend,
    )
    result["loadavg"] = Path("/proc/loadavg").read_text().split()[0]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
