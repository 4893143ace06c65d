"""Worker start-up: time from starting a ``caravel worker`` process to its first job's handler.

Each run gets a fresh queue database with one ``bench.stamp.v1`` job already waiting; the clock
starts just before the process is spawned and stops at the start time the handler prints.
``python -m bench.startup [runs]`` measures PostgreSQL and SQLite, interleaved run by run, and
prints the figures as JSON; ``--instructions`` counts the worker's instructions under Valgrind
instead of timing it, a figure the rest of a shared machine's load hardly moves. Every source
tree is byte-compiled first, as an installed package is: where bytecode is not written
(``PYTHONDONTWRITEBYTECODE``) each worker would otherwise compile Caravel's modules again, a
cost no deployment pays.
"""

from __future__ import annotations

import asyncio
import compileall
import json
import os
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
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
        # Not the peers' own virtual environments under bench/.venvs: another Python's.
        compileall.compile_dir(tree, quiet=1, rx=re.compile(r"/\.venvs/"))


#: ``--instructions``: the worker runs under Valgrind, which counts what it executes.
VALGRIND = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file={out}"]


def _spawn(url: str, queue: str, source: Path, prefix: list[str]) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(source), str(ROOT)])}
    return subprocess.Popen(
        [*prefix, *worker_command(url, queue=queue)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def _stamped(worker: subprocess.Popen[str], job_id: str, timeout: float) -> float:
    """When the handler of job ``job_id`` started, as the worker printed it."""
    assert worker.stdout is not None
    line = worker.stdout.readline()  # the handler's "<job id> <time>"
    if not line:
        raise RuntimeError(f"the worker exited with {worker.wait(timeout)} before its job")
    seen_id, at = line.split()
    assert seen_id == job_id, (seen_id, job_id)
    return float(at)


def first_job_seconds(
    url: str, queue: str = QUEUE, *, source: Path = SOURCE, timeout: float = 30.0
) -> tuple[float, float]:
    """One run on an empty queue of a migrated database: enqueue a job, start a worker process
    for the queue (Caravel imported from ``source``), wait for the handler's stamp, stop the
    worker. Returns the seconds to the first job, and the CPU seconds the worker process used
    in all (its graceful stop included), less noisy on a shared machine."""
    job_id = asyncio.run(_enqueue_one(url, queue))
    before = time.time()
    worker = _spawn(url, queue, source, [])
    try:
        elapsed = _stamped(worker, job_id, timeout) - before
    finally:
        worker.terminate()
    _, status, usage = os.wait4(worker.pid, 0)
    worker.returncode = os.waitstatus_to_exitcode(status)
    return elapsed, usage.ru_utime + usage.ru_stime


def first_job_instructions(url: str, queue: str = QUEUE, *, source: Path = SOURCE) -> int:
    """The same run under Valgrind's cachegrind (about 30 s): the instructions the worker
    process executed from its start to its first job's handler and through its graceful stop.
    Unlike the seconds, the count hardly moves with the rest of the machine's load (repeated
    runs agree to about 0.2%), so it can tell apart changes of a few percent."""
    job_id = asyncio.run(_enqueue_one(url, queue))
    with tempfile.TemporaryDirectory(prefix="caravel-bench-") as folder:
        out = Path(folder) / "cachegrind.out"
        worker = _spawn(url, queue, source, [a.format(out=out) for a in VALGRIND])
        try:
            _stamped(worker, job_id, 300.0)
        finally:
            worker.terminate()
            worker.wait(300)
        for line in out.read_text().splitlines():
            if line.startswith("summary:"):
                return int(line.split()[1])
    raise RuntimeError("cachegrind wrote no summary")


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
    *,
    instructions: bool = False,
) -> dict[str, Any]:
    """Every backend and every source tree (``{"after": SOURCE}`` unless given: a label for
    each copy of Caravel's ``src`` folder to compare), one run of each in turn, each run on a
    database of its own; the 1-minute load average after each round. With ``instructions``,
    each run counts the worker's instructions (:func:`first_job_instructions`) instead."""
    trees = sources if sources is not None else {"after": SOURCE}
    byte_compile(ROOT / "bench", *trees.values())
    samples: dict[str, list[tuple[float, float]]] = {
        f"{b} {t}": [] for b in backends for t in trees
    }
    counts: dict[str, list[int]] = {key: [] for key in samples}
    loads = []
    for _ in range(runs):
        for backend in backends:
            for label, tree in trees.items():
                key = f"{backend} {label}"
                with database(backend) as url:
                    if instructions:
                        counts[key].append(first_job_instructions(url, source=tree))
                    else:
                        samples[key].append(first_job_seconds(url, source=tree))
        loads.append(Path("/proc/loadavg").read_text().split()[0])
    figures: dict[str, Any] = {
        key: _instructions(counts[key]) if instructions else _summary(s)
        for key, s in samples.items()
    }
    figures["loadavg_1min"] = loads
    return figures


def _instructions(counts: list[int]) -> dict[str, Any]:
    return {
        "runs": len(counts),
        "median_instructions": statistics.median(counts),
        "min_instructions": min(counts),
        "max_instructions": max(counts),
        "samples": counts,
    }


def main(argv: list[str]) -> None:
    """``python -m bench.startup [--instructions] [RUNS] [LABEL=SRC_FOLDER ...]``"""
    instructions = "--instructions" in argv
    argv = [arg for arg in argv if arg != "--instructions"]
    runs = int(argv[0]) if argv else 5
    trees = dict(arg.split("=", 1) for arg in argv[1:])
    sources = {label: Path(folder) for label, folder in trees.items()} or None
    print(json.dumps(interleaved(runs, sources=sources, instructions=instructions), indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
