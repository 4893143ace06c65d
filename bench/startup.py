"""Worker start-up: time from starting a ``caravel worker`` process to its first job's handler.

Each run gets a fresh queue database with one ``bench.stamp.v1`` job already waiting; the clock
starts just before the process is spawned and stops at the start time the handler prints.
``python -m bench.startup [runs]`` measures PostgreSQL and SQLite, interleaved run by run, and
prints the figures as JSON. Every source tree is byte-compiled first, as an installed package is:
where bytecode is not written (``PYTHONDONTWRITEBYTECODE``) each worker would otherwise compile
Caravel's modules again, a cost no deployment pays.
"""

from __future__ import annotations

import asyncio
import compileall
import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.apps import QUEUE, Stamp, registry, worker_command
from bench.databases import database
from caravel import DatabaseQueue, DispatchOptions

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "src"


async def _enqueue_one(url: str, queue_name: str) -> str:
    async with DatabaseQueue(url, registry) as queue:
        result = await queue.enqueue(Stamp(0), DispatchOptions(queue=queue_name, tenant_id="bench"))
    return str(result.job_id)


def byte_compile(*trees: Path) -> None:
    """Write the bytecode of every module under ``trees`` (``compileall`` writes it even where
    the environment turns writing off), so the workers measured load it as an installed
    package's."""
    for tree in trees:
        compileall.compile_dir(tree, quiet=1)


def first_job_seconds(
    url: str, queue: str = QUEUE, *, source: Path = SOURCE, timeout: float = 30.0
) -> tuple[float, float]:
    """One run on an empty queue of a migrated database: enqueue a job, start a worker process
    for the queue (Caravel imported from ``source``), wait for the handler's stamp, stop the
    worker. Returns the seconds to the first job, and the CPU seconds the worker process used
    in all (its graceful stop included), less noisy on a shared machine."""
    job_id = asyncio.run(_enqueue_one(url, queue))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(source), str(ROOT)])}
    command = worker_command(url, queue=queue)
    before = time.time()
    worker = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert worker.stdout is not None
        line = worker.stdout.readline()  # the handler's "<job id> <time>"
        if not line:
            raise RuntimeError(f"the worker exited with {worker.wait(timeout)} before its job")
        seen_id, at = line.split()
        assert seen_id == job_id, (seen_id, job_id)
        elapsed = float(at) - before
    finally:
        worker.terminate()
    _, status, usage = os.wait4(worker.pid, 0)
    worker.returncode = os.waitstatus_to_exitcode(status)
    return elapsed, usage.ru_utime + usage.ru_stime


def startup(url: str, runs: int = 5) -> dict[str, Any]:
    """``runs`` start-ups against the migrated database at ``url``, each on a queue of its own
    (a fresh queue per run, one job waiting in it)."""
    byte_compile(ROOT / "bench", SOURCE)
    return _summary(
        [first_job_seconds(url, f"{QUEUE}-{secrets.token_hex(4)}") for _ in range(runs)]
    )


def _summary(runs: list[tuple[float, float]]) -> dict[str, Any]:
    samples = [seconds for seconds, _ in runs]
    return {
        "runs": len(samples),
        "median_seconds": statistics.median(samples),
        "min_seconds": min(samples),
        "max_seconds": max(samples),
        "median_cpu_seconds": statistics.median(cpu for _, cpu in runs),
        "samples": samples,
    }


def interleaved(
    runs: int = 5,
    backends: tuple[str, ...] = ("postgresql", "sqlite"),
    sources: dict[str, Path] | None = None,
) -> dict[str, Any]:
    """Every backend and every source tree (``{"after": SOURCE}`` unless given: a label for
    each copy of Caravel's ``src`` folder to compare), one run of each in turn, each run on a
    database of its own; the 1-minute load average after each round."""
    trees = sources if sources is not None else {"after": SOURCE}
    byte_compile(ROOT / "bench", *trees.values())
    samples: dict[str, list[tuple[float, float]]] = {
        f"{b} {t}": [] for b in backends for t in trees
    }
    loads = []
    for _ in range(runs):
        for backend in backends:
            for label, tree in trees.items():
                with database(backend) as url:
                    samples[f"{backend} {label}"].append(first_job_seconds(url, source=tree))
        loads.append(Path("/proc/loadavg").read_text().split()[0])
    figures: dict[str, Any] = {key: _summary(s) for key, s in samples.items()}
    figures["loadavg_1min"] = loads
    return figures


def main(argv: list[str]) -> None:
    """``python -m bench.startup [RUNS] [LABEL=SRC_FOLDER ...]``"""
    runs = int(argv[0]) if argv else 5
    trees = dict(arg.split("=", 1) for arg in argv[1:])
    sources = {label: Path(folder) for label, folder in trees.items()} or None
    print(json.dumps(interleaved(runs, sources=sources), indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
