"""One function per measurement. Each takes a migrated, empty queue database URL and returns a
dictionary of figures."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import statistics
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from bench.apps import QUEUE, Noop, Stamp, registry, worker_command
from bench.databases import completed_rows, postgres_dsn
from caravel import (
    ConcurrencyLimit,
    DatabaseQueue,
    DispatchOptions,
    JobContext,
    JobRegistry,
    QueueCounts,
    QueueInspector,
    QueueWorker,
    WorkerOptions,
    Workflow,
)
from caravel.store.urls import backend_of

ROOT = Path(__file__).resolve().parent.parent


async def _counts(queue: DatabaseQueue) -> list[QueueCounts]:
    """The bench queue's counts, read over the queue's own connections."""
    return await QueueInspector(queue.store, clock=queue.clock).queue_counts(QUEUE)


def dispatch(key: str | None = None, priority: int = 0) -> DispatchOptions:
    return DispatchOptions(queue=QUEUE, tenant_id="bench", idempotency_key=key, priority=priority)


def _priority(i: int, levels: int) -> int:
    """The ``i``-th job's priority when ``levels`` priorities, spread evenly over -100 to 100,
    take turns (1: every job 0; 201: every priority)."""
    if levels <= 1:
        return 0
    return -100 + 200 * ((i * 37) % levels) // (levels - 1)


#: The dispatch of a backlog's ``i``-th job (see :func:`fill_backlog`).
Spread = Callable[[int], DispatchOptions]


async def fill_backlog(
    queue: DatabaseQueue,
    n: int,
    batch: int = 1000,
    *,
    levels: int = 1,
    batches: bool = False,
    spread: Spread | None = None,
    workflow: bool = False,
) -> None:
    """``n`` jobs whose priorities take turns among ``levels`` (see :func:`_priority`): with
    more than one, a backlog whose claim order is not its insertion order. With ``batches``
    each ``batch`` jobs are one batch (:meth:`~caravel.DatabaseQueue.enqueue_batch`, no
    callback), so every acknowledgement also counts its job in its batch's row. ``spread``
    gives the ``i``-th job its dispatch instead (its tenant or partition key, say). With
    ``workflow`` the ``n`` jobs are one workflow (:func:`fan_out_fan_in`)."""
    if workflow:
        await queue.enqueue_workflow(fan_out_fan_in(n))
        return
    for start in range(0, n, batch):
        items = [
            (Noop(i), spread(i) if spread else dispatch(priority=_priority(i, levels)))
            for i in range(start, min(n, start + batch))
        ]
        if batches:
            await queue.enqueue_batch(items)
        else:
            await queue.enqueue_many(items)


#: The numbers of a workflow's root and fan-in jobs (the members are numbered from 0).
ROOT_N, FAN_IN_N = -1, -2


def fan_out_fan_in(n: int) -> Workflow:
    """One workflow of ``n`` jobs: a root, ``n - 2`` members after it (a fan-out) and one step
    after every member (the fan-in): each member's finish satisfies one edge of the fan-in's
    counter, and the last one releases it."""
    graph = Workflow("bench-fan", tenant_id="bench")
    graph.add("root", Noop(ROOT_N), options=dispatch())
    graph.add_many("members", [Noop(i) for i in range(n - 2)], after=["root"], options=dispatch())
    graph.add("fan-in", Noop(FAN_IN_N), after=["members"], options=dispatch())
    return graph


# ----- enqueue --------------------------------------------------------------------------------


async def enqueue_single(url: str, n: int, producers: int = 1) -> dict[str, Any]:
    """One ``enqueue`` call per job, each its own durable, idempotent transaction, from
    ``producers`` concurrent callers sharing one queue (as a web application's requests do)."""
    async with DatabaseQueue(url, registry) as queue:
        await queue.enqueue(Noop(-1), dispatch("warm-up"))

        async def produce(first: int) -> None:
            for i in range(first, n, producers):
                await queue.enqueue(Noop(i), dispatch(f"key-{i}"))

        started = time.perf_counter()
        await asyncio.gather(*(produce(p) for p in range(producers)))
        elapsed = time.perf_counter() - started
        assert (await _counts(queue))[0].ready == n + 1
    return {"jobs": n, "producers": producers, "seconds": elapsed, "jobs_per_second": n / elapsed}


async def enqueue_bulk(url: str, n: int, batch: int = 1000) -> dict[str, Any]:
    """``enqueue_many`` in batches, every job with its own idempotency key."""
    async with DatabaseQueue(url, registry) as queue:
        await queue.enqueue(Noop(-1), dispatch("warm-up"))
        started = time.perf_counter()
        for start in range(0, n, batch):
            await queue.enqueue_many(
                [(Noop(i), dispatch(f"key-{i}")) for i in range(start, min(n, start + batch))]
            )
        elapsed = time.perf_counter() - started
    return {"jobs": n, "batch": batch, "seconds": elapsed, "jobs_per_second": n / elapsed}


# ----- drain ----------------------------------------------------------------------------------


class _Counter:
    """Counts handler runs until ``target``; notes when the first and the last job numbered 0
    or above ran, and when each job numbered below zero did (a workflow's root and fan-in, see
    :func:`fan_out_fan_in`)."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.seen = 0
        self.done = asyncio.Event()
        self.first = self.last = 0.0
        self.marks: dict[int, float] = {}

    def hit(self, n: int = 0) -> None:
        now = time.perf_counter()
        self.seen += 1
        if n < 0:
            self.marks[n] = now
        else:
            self.first = self.first or now
            self.last = now
        if self.seen >= self.target:
            self.done.set()


async def drain(
    url: str,
    n: int,
    concurrency: int,
    *,
    durable_acks: bool = False,
    priority_levels: int = 1,
    batches: bool = False,
    spread: Spread | None = None,
    limit: ConcurrencyLimit | None = None,
    workflow: bool = False,
) -> dict[str, Any]:
    """N pre-enqueued no-op jobs processed to completion (acknowledgements written) by one
    worker with the given concurrency, its acknowledgements asynchronous (the default) or
    ``durable_acks``; with ``priority_levels`` above 1, the jobs' priorities take turns among that
    many; with ``batches``, the jobs are members of batches of 1,000; with ``spread``, each job
    dispatched as it says (see :func:`fill_backlog`); with ``workflow``, the jobs are one
    fan-out/fan-in workflow (:func:`fan_out_fan_in`), so the drain includes each release:
    the members' after the root, the fan-in's after the last member. ``limit`` is stored before
    the worker starts, so every claim it makes is a limited one."""
    counter = _Counter(n)
    counting = JobRegistry()

    @counting.handles("bench.noop.v1", Noop)
    async def count(job: Noop, ctx: JobContext[None]) -> None:
        counter.hit(job.n)

    async with DatabaseQueue(url, counting) as queue:
        filling = time.perf_counter()
        await fill_backlog(
            queue, n, levels=priority_levels, batches=batches, spread=spread, workflow=workflow
        )
        filled = time.perf_counter() - filling
        if limit is not None:
            await queue.set_queue_limit(limit)
        options = WorkerOptions(concurrency=concurrency, durable_acks=durable_acks)
        worker = QueueWorker(queue, options=options)
        started = time.perf_counter()
        running = asyncio.create_task(worker.run(QUEUE))
        await counter.done.wait()
        worker.stop()
        await running  # includes writing the last acknowledgements
        elapsed = time.perf_counter() - started
        await worker.close()
    # Counted exactly: queue_counts estimates finished jobs past 10,000 (see completed_rows).
    completed = await asyncio.to_thread(completed_rows, url, QUEUE)
    return {
        "jobs": n,
        "concurrency": concurrency,
        "seconds": elapsed,
        "jobs_per_second": n / elapsed,
        "completed": completed,
        "enqueue_seconds": filled,
        **(_releases(counter, started) if workflow else {}),
    }


def _releases(counter: _Counter, started: float) -> dict[str, float]:
    """Where a workflow's drain waited on its releases: from the worker's start to the root's
    handler; from the root's handler to the first member's (the root's acknowledgement, whose
    statement releases every member, and the claim that finds them); from the last member's
    handler to the fan-in's (its acknowledgement releasing the fan-in, and the claim)."""
    root, fan_in = counter.marks.get(ROOT_N, started), counter.marks.get(FAN_IN_N, counter.last)
    return {
        "start_to_root_s": root - started,
        "root_to_first_member_s": counter.first - root,
        "last_member_to_fan_in_s": fan_in - counter.last,
    }


async def steady(url: str, seconds: float, producers: int, concurrency: int) -> dict[str, Any]:
    """Producers calling ``enqueue`` one job at a time while one worker runs, for a fixed
    time: throughput and the backlog left at the end."""
    async with DatabaseQueue(url, registry) as queue:
        worker = QueueWorker(queue, options=WorkerOptions(concurrency=concurrency))
        running = asyncio.create_task(worker.run(QUEUE))
        produced = 0
        deadline = time.perf_counter() + seconds

        async def produce(offset: int) -> None:
            nonlocal produced
            i = 0
            while time.perf_counter() < deadline:
                await queue.enqueue(Noop(offset + i), dispatch())
                produced += 1
                i += 1

        before = time.perf_counter()
        await asyncio.gather(*(produce(p * 10_000_000) for p in range(producers)))
        elapsed = time.perf_counter() - before
        counts = (await _counts(queue))[0]
        completed = await asyncio.to_thread(completed_rows, url, QUEUE)
        worker.stop()
        await running
        await worker.close()
    return {
        "seconds": elapsed,
        "producers": producers,
        "concurrency": concurrency,
        "enqueued_per_second": produced / elapsed,
        "completed_per_second": completed / elapsed,
        "backlog_at_end": counts.ready + counts.running,
    }


# ----- wake-up latency ------------------------------------------------------------------------


def latency(url: str, n: int, gap: float) -> dict[str, Any]:
    """An idle worker in its own process; jobs enqueued one at a time ``gap`` seconds apart;
    time from just before the enqueue call to the handler's start."""
    worker = subprocess.Popen(
        worker_command(url, "--poll-interval", "1"),
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    starts: dict[str, float] = {}
    seen = threading.Condition()

    def read() -> None:
        assert worker.stdout is not None
        for line in worker.stdout:
            job_id, at = line.split()
            with seen:
                starts[job_id] = float(at)
                seen.notify_all()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert worker.stderr is not None
    worker.stderr.readline()  # "processing ..." once the worker is up

    calls: list[float] = []  # the enqueue call alone

    async def produce() -> list[float]:
        samples: list[float] = []
        async with DatabaseQueue(url, registry) as queue:
            for i in range(n + 10):
                before = time.time()
                result = await queue.enqueue(Stamp(i), dispatch())
                returned = time.time()
                job_id = str(result.job_id)
                with seen:
                    seen.wait_for(lambda j=job_id: j in starts, timeout=10)
                if i >= 10 and job_id in starts:  # the first ten warm up connections
                    samples.append((starts[job_id] - before) * 1000)
                    calls.append((returned - before) * 1000)
                await asyncio.sleep(gap)
        return samples

    try:
        samples = asyncio.run(produce())
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    samples.sort()
    calls.sort()

    def pct(values: list[float], p: float) -> float:
        return values[min(len(values) - 1, int(len(values) * p))]

    return {
        "jobs": len(samples),
        "gap_ms": gap * 1000,
        "p50_ms": pct(samples, 0.50),
        "p95_ms": pct(samples, 0.95),
        "p99_ms": pct(samples, 0.99),
        "enqueue_call_p50_ms": pct(calls, 0.50),
    }


# ----- retained history -----------------------------------------------------------------------


def seed_history(url: str, rows: int) -> None:
    """Insert ``rows`` completed jobs of another queue straight through SQL, then write them
    out to disk (a checkpoint), as a real table's old history would be. Without that, the
    drain measured next paid for flushing the seed's hundreds of megabytes of dirty pages."""
    if backend_of(url) == "postgresql":
        with psycopg.connect(postgres_dsn(url), autocommit=True) as conn:
            conn.execute(
                """
                INSERT INTO caravel_jobs (id, queue, job_type, tenant_id, idempotency_key,
                    payload, state, attempt, max_attempts, due_at, lease_token, started_at,
                    finished_at, created_at, updated_at)
                SELECT gen_random_uuid(), 'history', 'bench.noop.v1', 'bench', 'h-' || g,
                    '{"n":' || g || '}', 'completed', 1, 3, 1, 1, 1, 2, 1, 2
                FROM generate_series(1, %s) AS g
                """,
                (rows,),
            )
            conn.execute("VACUUM ANALYZE caravel_jobs")
            conn.execute("CHECKPOINT")
        return
    path = url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        conn.execute(
            """
            WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < ?)
            INSERT INTO caravel_jobs (id, queue, job_type, tenant_id, idempotency_key, payload,
                state, attempt, max_attempts, due_at, lease_token, started_at, finished_at,
                created_at, updated_at)
            SELECT lower(hex(randomblob(16))), 'history', 'bench.noop.v1', 'bench', 'h-' || x,
                '{"n":' || x || '}', 'completed', 1, 3, 1, 1, 1, 2, 1, 2
            FROM g
            """,
            (rows,),
        )
        conn.execute("ANALYZE")
        conn.commit()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    os.sync()


# ----- memory ---------------------------------------------------------------------------------


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def memory(url: str, n: int, concurrency: int, window: int = 50_000) -> dict[str, Any]:
    """One worker process draining ``n`` jobs fed in batches: resident memory over the run, and
    its growth between the first and the last ``window`` jobs."""
    worker = subprocess.Popen(
        worker_command(url, "--concurrency", str(concurrency), "--poll-interval", "0.05"),
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert worker.stderr is not None
    worker.stderr.readline()
    samples: list[tuple[int, int]] = []  # (jobs completed, RSS KiB)

    async def feed() -> None:
        async with DatabaseQueue(url, registry) as queue:
            fed = 0
            while True:
                counts = await _counts(queue)
                done = counts[0].completed if counts else 0
                backlog = (counts[0].ready + counts[0].running) if counts else 0
                samples.append((done, _rss_kib(worker.pid)))
                if done >= n:
                    return
                if fed < n and backlog < 20_000:
                    step = min(10_000, n - fed)
                    await fill_backlog(queue, step)
                    fed += step
                await asyncio.sleep(0.2)

    started = time.perf_counter()
    try:
        asyncio.run(feed())
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    elapsed = time.perf_counter() - started
    first = [rss for done, rss in samples if 0 < done <= window] or [samples[0][1]]
    last = [rss for done, rss in samples if done >= n - window] or [samples[-1][1]]
    first_mib, last_mib = statistics.median(first) / 1024, statistics.median(last) / 1024
    return {
        "jobs": n,
        "seconds": elapsed,
        "peak_rss_mib": max(rss for _, rss in samples) / 1024,
        "rss_first_window_mib": first_mib,
        "rss_last_window_mib": last_mib,
        "growth_percent": (last_mib - first_mib) / first_mib * 100,
    }
