"""Idle wake-up latency and idle CPU of a worker in its own process.

    python -m bench.wakeup postgresql sqlite --jobs 1000 --trace
    python -m bench.wakeup mariadb --jobs 300 --gap 0 --jitter 0.1 --poll-interval 0.05

``latency`` times each job from just before the producer's enqueue call to its handler's start
in the worker (``bench.apps.Stamp`` prints the moment), jobs ``gap`` seconds apart. Both
timestamps are taken on the same clock of the same machine, in different processes, so nothing
the producer does after its enqueue returns (reading the worker's pipe, its event loop waking)
can lengthen a sample. With ``trace`` the worker also reports the garbage collector's pauses
since the previous job, so a slow sample can be matched with them.

``idle_cpu`` is the CPU time an idle worker (and, on PostgreSQL, the server backends of its
database) uses over a number of seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from bench.apps import QUEUE, TRACE_ENV, Stamp, registry, worker_command
from bench.databases import database, postgres_dsn
from caravel import DatabaseQueue, DispatchOptions
from caravel.store.urls import backend_of

ROOT = Path(__file__).resolve().parent.parent
WARM_UP = 10


@contextmanager
def _worker(url: str, poll_interval: float, *, trace: bool) -> Iterator[subprocess.Popen[str]]:
    """``caravel worker`` on the bench queue in a process of its own, once it is up."""
    # The caller's path first, so the worker runs the same caravel as the producer.
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*path, str(ROOT)])}
    if trace:
        env[TRACE_ENV] = "1"
    command = worker_command(url, "--poll-interval", str(poll_interval))
    worker = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stderr is not None
        worker.stderr.readline()  # "processing ..." once the worker is up
        yield worker
    finally:
        worker.terminate()
        worker.wait(timeout=30)


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))] if ordered else float("nan")


def latency(
    url: str,
    n: int = 1000,
    gap: float = 0.01,
    *,
    poll_interval: float = 1.0,
    trace: bool = False,
    jitter: float = 0.0,
    seed: int = 1,
    warm_up: int = WARM_UP,
) -> dict[str, Any]:
    """An idle worker in its own process; ``n`` jobs enqueued one at a time ``gap`` seconds
    apart (after ``warm_up`` jobs, ten by default, that warm up connections); time from just
    before the enqueue call to the handler's start, and (``after_commit_*``) from the call's
    return, when the job is committed, to the handler's start. With ``jitter`` each pause is
    drawn anew, uniformly from ``gap`` to ``gap + jitter`` (from a generator seeded with
    ``seed``): a worker that polls would otherwise see each job the same time after its
    previous look. With ``trace``, ``slowest`` lists the twenty slowest samples with what
    happened in them."""
    pauses = random.Random(seed)
    starts: dict[str, list[str]] = {}
    seen = threading.Condition()
    with _worker(url, poll_interval, trace=trace) as worker:

        def read() -> None:
            assert worker.stdout is not None
            for line in worker.stdout:
                job_id, *rest = line.split()
                with seen:
                    starts[job_id] = rest
                    seen.notify_all()

        threading.Thread(target=read, daemon=True).start()
        samples: list[dict[str, Any]] = []
        gc_pauses = 0

        async def produce() -> None:
            nonlocal gc_pauses
            dispatch = DispatchOptions(queue=QUEUE, tenant_id="bench")
            async with DatabaseQueue(url, registry) as queue:
                began = time.time()
                for i in range(n + warm_up):
                    await asyncio.sleep(gap + pauses.uniform(0.0, jitter) if jitter else gap)
                    before = time.time()
                    result = await queue.enqueue(Stamp(i), dispatch)
                    returned = time.time()
                    job_id = str(result.job_id)
                    # Blocking the loop here is harmless: the job's start is stamped by the
                    # worker, and the next enqueue is only due after it.
                    with seen:
                        seen.wait_for(lambda j=job_id: j in starts, timeout=10 + 2 * poll_interval)
                    if i < warm_up or job_id not in starts:
                        continue
                    at, *extra = starts[job_id]
                    sample = {
                        "at_s": round(before - began, 3),
                        "ms": (float(at) - before) * 1000,
                        "enqueue_ms": (returned - before) * 1000,
                        "after_commit_ms": (float(at) - returned) * 1000,
                    }
                    if extra:
                        sample.update(_within(json.loads(extra[0]), before, float(at)))
                        gc_pauses += len(json.loads(extra[0])["gc"])
                    samples.append(sample)

        asyncio.run(produce())
    wakes = [s["ms"] for s in samples]
    calls = [s["enqueue_ms"] for s in samples]
    committed = [s["after_commit_ms"] for s in samples]
    figures: dict[str, Any] = {
        "backend": backend_of(url),
        "jobs": len(samples),
        "gap_ms": gap * 1000,
        "jitter_ms": jitter * 1000,
        "poll_interval_s": poll_interval,
        "p50_ms": _pct(wakes, 0.50),
        "p95_ms": _pct(wakes, 0.95),
        "p99_ms": _pct(wakes, 0.99),
        "p999_ms": _pct(wakes, 0.999),
        "max_ms": max(wakes, default=float("nan")),
        "enqueue_call_p50_ms": _pct(calls, 0.50),
        "enqueue_call_p99_ms": _pct(calls, 0.99),
        "after_commit_p50_ms": _pct(committed, 0.50),
        "after_commit_p95_ms": _pct(committed, 0.95),
        "after_commit_p99_ms": _pct(committed, 0.99),
        "after_commit_max_ms": max(committed, default=float("nan")),
    }
    if trace:
        slowest = sorted(samples, key=lambda s: -s["ms"])[:20]
        figures["slowest"] = [{k: _round(v) for k, v in s.items()} for s in slowest]
        figures["samples"] = samples
        figures["gc_pauses"] = gc_pauses
        figures["gc_ms_in_samples"] = sum(s.get("gc_ms", 0.0) for s in samples)
    return figures


def _within(trace: dict[str, Any], start: float, end: float) -> dict[str, Any]:
    """The worker's traced pauses and store operations that overlap one sample."""
    gc = [g for g in trace["gc"] if start <= g[0] <= end]
    ops = [op for op in trace["ops"] if op[1] <= end and op[1] + op[2] / 1000 >= start]
    return {
        "gc_ms": sum(g[1] for g in gc),
        "ops": [f"{name}@{(at - start) * 1000:.1f}+{ms:.1f}" for name, at, ms in ops],
    }


def _round(value: Any) -> Any:
    return round(value, 3) if isinstance(value, float) else value


# ----- idle CPU -------------------------------------------------------------------------------


def _cpu_seconds(pid: int) -> float:
    """User and system CPU time of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _backends(url: str) -> list[int]:
    """The server processes of the other sessions on the database ``url`` names."""
    with psycopg.connect(postgres_dsn(url), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return [int(row[0]) for row in rows]


def idle_cpu(url: str, seconds: float = 30.0, *, poll_interval: float = 1.0) -> dict[str, Any]:
    """CPU seconds an idle worker uses over ``seconds`` (after a second to settle), and on
    PostgreSQL those of its database's server backends (its pool and its listener)."""
    with _worker(url, poll_interval, trace=False) as worker:
        time.sleep(1.0)
        backends = _backends(url) if backend_of(url) == "postgresql" else []
        watched = [worker.pid, *backends]
        before = [_cpu_seconds(pid) for pid in watched]
        time.sleep(seconds)
        after = [_cpu_seconds(pid) for pid in watched]
    used = [b - a for a, b in zip(before, after, strict=True)]
    return {
        "backend": backend_of(url),
        "seconds": seconds,
        "poll_interval_s": poll_interval,
        "worker_cpu_s": used[0],
        "server_cpu_s": sum(used[1:]),
        "server_backends": len(backends),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("backends", nargs="+", choices=("postgresql", "sqlite", "mariadb"))
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--gap", type=float, default=0.01)
    parser.add_argument(
        "--jitter", type=float, default=0.0, help="each pause longer by up to this (s), at random"
    )
    parser.add_argument("--poll-interval", type=float, default=1.0)
    parser.add_argument("--trace", action="store_true", help="list the slowest samples")
    parser.add_argument("--dump", help="with --trace: write every sample to this JSON file")
    parser.add_argument("--idle", type=float, default=0.0, help="also measure idle CPU (s)")
    args = parser.parse_args()
    for backend in args.backends:
        with database(backend) as url:
            found = latency(
                url,
                args.jobs,
                args.gap,
                poll_interval=args.poll_interval,
                trace=args.trace,
                jitter=args.jitter,
            )
        slowest = found.pop("slowest", [])
        every = found.pop("samples", [])
        if args.dump and every:
            Path(args.dump).write_text(json.dumps(every))
        print(json.dumps(found))
        for sample in slowest:
            print("  slow:", json.dumps(sample))
        if args.idle:
            with database(backend) as url:
                print(json.dumps(idle_cpu(url, args.idle, poll_interval=args.poll_interval)))


if __name__ == "__main__":
    main()
