"""Caravel and its peers measured alike, through the adapters (bench/adapters) and the harness
(bench/harness.py): the drain at each library's best worker settings (found by a sweep on this
machine), one-call and bulk enqueue with their CPU cost, idle wake-up latency and worker start-up.

Equal durability: in the ``durable`` drains every library's commits wait for the disk, Caravel's
acknowledgements included (``WorkerOptions(durable_acks=True)``). In the ``async`` drains Caravel
sends its acknowledgements with ``synchronous_commit=off`` (its default) and the peers, which have
no such option, run with ``synchronous_commit=off`` for every statement of theirs, claims included:
if anything, that favours them.

graphile-worker runs under Node.js (bench/node.py installs it); its adapter is the ``node``
process itself, so its CPU time is counted as the client's like every other adapter's.
"""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Callable
from typing import Any

from bench import grids
from bench.apps import worker_command
from bench.harness import (
    ATTEMPTS,
    LIBRARIES,
    MAX_OTHER_CORES,
    ROOT,
    Adapter,
    Library,
    Meter,
    checkpoint,
    fresh_database,
    once,
    unfinished,
)
from bench.startup import byte_compile

#: Each library's worker settings tried by the sweep: processes and its own knobs, wide enough
#: that the best sits inside each knob's range on a 2-core machine (a best on an edge is
#: reported: ``edge`` in the report, a warning as the sweep ends). Caravel keeps both event loops:
#: uvloop won every pairing in run J, but by 3 to 13%, and the 12 extra drains take about a minute.
GRIDS: dict[str, list[dict[str, Any]]] = {
    "caravel": [
        {"processes": n, "concurrency": c, "loop": loop}
        for n in (1, 2, 3)
        for c in (100, 250, 500, 1024)
        for loop in ("asyncio", "uvloop")
    ],
    "pgqueuer": [
        {"processes": n, "batch": b} for n in (1, 2, 3, 4) for b in (100, 1000, 5000, 10000)
    ],
    "oban": [{"processes": n, "limit": c} for n in (1, 2, 3) for c in (50, 200, 1000, 2000)],
    "procrastinate": [
        {"processes": n, "concurrency": c}
        for n in (1, 2, 3, 4, 5, 6)
        for c in (10, 50, 100, 200, 400, 800)
    ],
    # graphile-worker as its performance guide runs it: a local queue (jobs fetched and locked
    # in batches) and completions batched (completeJobBatchDelay 0); with the local queue alone
    # it drained 20,000 jobs five times slower. In run V's sweeps local queues of 500 and
    # concurrency of 800 were slower throughout; the rest was level within the noise.
    "graphile": [
        {"processes": n, "concurrency": c, "local_queue": q, "complete_batch_delay": 0}
        for n in (1, 2, 3)
        for c in (25, 50, 100, 200, 400)
        for q in (1000, 2000, 4000, 8000)
    ],
}
#: After one drain per setting, the fastest few are drained again and the best is chosen by the
#: median of its drains: a 20,000-job drain lasts about half a second, and its noise alone moved
#: a library's best from one end of a flat stretch of its grid to the other (run V's sweeps).
CONFIRM_TOP = 4
CONFIRM_RUNS = 2
#: The most a library accepts for a knob: a best setting there is not on the edge of its grid.
CEILINGS: dict[str, dict[str, Any]] = {"caravel": {"concurrency": 1024}}  # WorkerOptions' range
#: The most jobs a slow peer's drain takes, so that a sitting stays within minutes:
#: procrastinate drains about a thousand jobs a second, oban a few thousand on 20,000 jobs and
#: about 1,300 on 100,000 (run J), which alone took over ten minutes of a three-sitting run.
#: Such a peer sits out the larger sizes.
MOST_JOBS = {"procrastinate": 5000, "oban": 20_000}


def _retry(measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``measure`` again while something else used the machine (up to ``ATTEMPTS`` times); the
    last reading is kept and marked when none was clean."""
    for attempt in range(1, ATTEMPTS + 1):
        figures = measure()
        figures["attempts"] = attempt
        if figures["other_cores"] <= MAX_OTHER_CORES:
            return figures
    figures["disturbed"] = True
    return figures


def jobs_for(lib: str, jobs: int) -> int:
    return min(jobs, MOST_JOBS.get(lib, jobs))


# ----- drain ------------------------------------------------------------------------------------


def drain(lib_name: str, jobs: int, settings: dict[str, Any], *, durable: bool) -> dict[str, Any]:
    """One drain of ``jobs`` waiting no-op jobs by ``settings["processes"]`` worker processes,
    from the moment they are told to start to the moment the database holds every job as
    finished (acknowledgements committed)."""
    lib = LIBRARIES[lib_name]
    jobs = jobs_for(lib_name, jobs)
    worker_settings = {k: v for k, v in settings.items() if k != "processes"}
    if lib_name == "caravel":
        worker_settings["durable_acks"] = durable

    def measure() -> dict[str, Any]:
        # Caravel's asynchronous acknowledgements are its own setting; the peers get theirs
        # from the database.
        with fresh_database(lib, durable=durable or lib_name == "caravel") as (dsn, name):
            once(lib, "fill", dsn, jobs)
            checkpoint(dsn)
            workers = [
                Adapter.start(lib, "drain", dsn, 0, worker_settings)
                for _ in range(settings["processes"])
            ]
            for worker in workers:
                worker.wait_for(lambda a: a.ready)
            meter = Meter(name, [w.process for w in workers])
            meter.start()
            for worker in workers:
                worker.say("go")
            deadline = time.monotonic() + 900
            while sum(w.count for w in workers) < jobs:
                if time.monotonic() > deadline or any(
                    w.process.poll() is not None for w in workers
                ):
                    raise RuntimeError(
                        f"{lib_name} drain stopped at {sum(w.count for w in workers)}"
                    )
                time.sleep(0.002)
            handled = time.perf_counter() - meter.started
            while unfinished(lib, dsn):
                time.sleep(0.002)
            reading = meter.stop()
            for worker in workers:
                worker.say("stop")
            for worker in workers:
                worker.wait_for(lambda a: a.result is not None)
                worker.finish()
        return {
            "jobs": jobs,
            "jobs_per_second": jobs / reading["wall_seconds"],
            # Until the last handler ran: some libraries hold their last acknowledgements
            # back for a while (a buffer's timeout), which weighs on short drains.
            "handled_jobs_per_second": jobs / handled,
            "client_cpu_ms_per_job": reading["client_cpu_seconds"] * 1000 / jobs,
            "server_cpu_ms_per_job": reading["server_cpu_seconds"] * 1000 / jobs,
            **reading,
        }

    return _retry(measure)


def sweep(lib: str, jobs: int, runs: int = 1) -> dict[str, Any]:
    """Every setting of ``lib``'s grid drained durably, then the ``CONFIRM_TOP`` fastest drained
    ``CONFIRM_RUNS`` times more: the best by the median of its drains among those, every setting
    tried, and the knobs whose best value is on the grid's edge (with a warning)."""
    tried = []
    for settings in GRIDS[lib]:
        rates = [drain(lib, jobs, settings, durable=True)["jobs_per_second"] for _ in range(runs)]
        tried.append({"settings": settings, "jobs_per_second": statistics.median(rates)})
        print(f"  sweep {lib:13} {settings} {tried[-1]['jobs_per_second']:,.0f} jobs/s", flush=True)
    leaders = sorted(tried, key=lambda t: -t["jobs_per_second"])[:CONFIRM_TOP]
    for leader in leaders:
        rates = [leader["jobs_per_second"]] + [
            drain(lib, jobs, leader["settings"], durable=True)["jobs_per_second"]
            for _ in range(CONFIRM_RUNS)
        ]
        leader["confirmed"] = rates
        leader["jobs_per_second"] = statistics.median(rates)
        print(
            f"  again {lib:13} {leader['settings']} {leader['jobs_per_second']:,.0f} jobs/s",
            flush=True,
        )
    best = max(leaders, key=lambda t: t["jobs_per_second"])["settings"]
    edge = grids.edges(best, GRIDS[lib], CEILINGS.get(lib))
    for found in edge:
        print(
            f"  warning: {lib}'s best setting ({grids.describe(best)}) has the {found['side']}"
            f" {found['knob']} its grid tried; widen GRIDS[{lib!r}] in bench/compare.py",
            flush=True,
        )
    return {"best": best, "tried": tried, "edge": edge, "jobs": jobs}


# ----- enqueue ----------------------------------------------------------------------------------


def enqueue(lib_name: str, jobs: int, *, bulk: bool) -> dict[str, Any]:
    """``jobs`` enqueued one call each by one caller (or in batches of 1,000), every job with an
    idempotency key where the library has one; with the CPU time of the producer and of the
    server per job."""
    lib = LIBRARIES[lib_name]

    def measure() -> dict[str, Any]:
        with fresh_database(lib) as (dsn, name):
            result = once(
                lib, "bulk" if bulk else "enqueue", dsn, jobs, {"batch": 1000}, meter_db=name
            )
        return {
            "jobs": jobs,
            "jobs_per_second": jobs / result["seconds"],
            "client_cpu_ms_per_job": result["client_cpu_seconds"] * 1000 / jobs,
            "server_cpu_ms_per_job": result["server_cpu_seconds"] * 1000 / jobs,
            **{k: v for k, v in result.items() if k != "starts"},
        }

    return _retry(measure)


# ----- wake-up and start-up ---------------------------------------------------------------------


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


def _start_worker(lib: Library, dsn: str) -> Adapter:
    """A worker whose handler prints each job's start (the ``tick`` job): Caravel's command
    line, or the peer's adapter."""
    if lib.name == "caravel":
        return Adapter(worker_command(dsn))
    return Adapter.start(lib, "stamp-worker", dsn)


def _stop(worker: Adapter) -> None:
    process = worker.process
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()


def latency(lib_name: str, jobs: int, gap: float = 0.01, warm_up: int = 20) -> dict[str, Any]:
    """An idle worker in its own process; a producer in another enqueues one job every ``gap``
    seconds; from just before each enqueue call to its handler's start."""
    lib = LIBRARIES[lib_name]
    with fresh_database(lib) as (dsn, name):
        worker = _start_worker(lib, dsn)
        stamps = worker.stamps
        try:
            # Up and claiming: its first job has run.
            once(lib, "enqueue", dsn, 1, {"job": "tick", "first": -1})
            _wait(lambda: -1 in stamps, 60)
            settings = {"job": "tick", "gap": gap}
            result = once(lib, "enqueue", dsn, jobs + warm_up, settings, name, [worker.process])
            _wait(lambda: len(stamps) >= jobs + warm_up + 1, 30)
        finally:
            _stop(worker)
    starts = result["starts"]
    samples = [
        (stamps[n] - starts[n]) * 1000 for n in range(warm_up, jobs + warm_up) if n in stamps
    ]
    return {
        "jobs": len(samples),
        "gap_ms": gap * 1000,
        "p50_ms": _pct(samples, 0.50),
        "p95_ms": _pct(samples, 0.95),
        "p99_ms": _pct(samples, 0.99),
        "p999_ms": _pct(samples, 0.999),
        "max_ms": max(samples),
        "other_cores": result["other_cores"],
        "loadavg_1m": result["loadavg_1m"],
    }


def _wait(test: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not test():
        if time.monotonic() > deadline:
            raise TimeoutError("waited too long")
        time.sleep(0.005)


def startup(lib_name: str, runs: int = 5) -> dict[str, Any]:
    """From just before a worker process is started to its first handler's start, one job
    already waiting; ``runs`` times, each on a new database."""
    lib = LIBRARIES[lib_name]
    if lib_name == "caravel":
        byte_compile(ROOT / "bench", ROOT / "src")  # as the peers' installed packages are
    seconds = []
    for _ in range(runs):
        with fresh_database(lib) as (dsn, _name):
            once(lib, "enqueue", dsn, 1, {"job": "tick"})
            checkpoint(dsn)
            before = time.time()
            worker = _start_worker(lib, dsn)
            try:
                _wait(lambda w=worker: bool(w.stamps), 60)
                seconds.append(min(worker.stamps.values()) - before)
            finally:
                _stop(worker)
    return {
        "runs": runs,
        "median_seconds": statistics.median(seconds),
        "min_seconds": min(seconds),
        "max_seconds": max(seconds),
    }


# ----- the whole comparison ---------------------------------------------------------------------


#: The figures whose spread across a sitting's runs is kept beside their median (``_min``,
#: ``_max``): what the page (bench/page.py) shows of a single sitting.
SPREAD = ("per_second", "_ms", "median_seconds")


def _median_of(results: list[dict[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {"runs": len(results)}
    for key, value in results[0].items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            values = [r[key] for r in results]
            merged[key] = statistics.median(values)
            if key.endswith(SPREAD):
                merged[f"{key}_min"], merged[f"{key}_max"] = min(values), max(values)
        elif key != "attempts":
            merged[key] = value
    merged["runs"] = len(results)
    merged["disturbed_runs"] = sum(1 for r in results if r.get("disturbed"))
    return merged


def _show(label: str, figures: dict[str, Any]) -> None:
    shown = ", ".join(
        f"{k}={v:,.2f}" if isinstance(v, float) else f"{k}={v}"
        for k, v in figures.items()
        if not k.endswith(("_min", "_max"))
    )
    print(f"  {label}: {shown}", flush=True)


def comparison(
    libraries: list[str],
    sizes: list[int],
    runs: int,
    *,
    single: int,
    bulk_jobs: int,
    latency_jobs: int,
    sweep_jobs: int,
    only: set[str],
    chosen: dict[str, dict[str, Any]] | None = None,
    earlier_sweeps: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Sweep, then every measurement with each library at its best, runs interleaved between
    the libraries so that a drift in the machine's speed touches all of them alike. Without
    the sweep, each library runs at the settings ``chosen`` names for it (an earlier sitting's
    sweep), else at the middle of its grid. With the sweep, a library ``chosen`` names is not
    swept again: its earlier sweep's record (``earlier_sweeps``) is carried over."""
    for lib in libraries:
        # A peer's interpreter or packages missing: say so now, not after minutes of runs.
        LIBRARIES[lib].command()
    report: dict[str, Any] = {
        "max_other_cores": MAX_OTHER_CORES,
        "versions": {lib: LIBRARIES[lib].version() for lib in libraries},
    }
    best: dict[str, dict[str, Any]] = {}
    if "sweep" in only:
        report["sweep"] = {}
        for lib in libraries:
            if chosen and lib in chosen:
                best[lib] = chosen[lib]
                if lib in (earlier_sweeps or {}):
                    report["sweep"][lib] = (earlier_sweeps or {})[lib]
                continue
            report["sweep"][lib] = sweep(lib, jobs_for(lib, sweep_jobs))
            best[lib] = report["sweep"][lib]["best"]
    else:
        chosen = chosen or {}
        best = {lib: chosen.get(lib) or grids.middle(GRIDS[lib]) for lib in libraries}
        report["settings_from"] = {
            lib: "an earlier sweep" if lib in chosen else "the middle of its grid"
            for lib in libraries
        }
    report["settings"] = best

    def interleaved(
        label: str, measure: Callable[[str], dict[str, Any]], libs: list[str]
    ) -> dict[str, Any]:
        found: dict[str, list[dict[str, Any]]] = {lib: [] for lib in libs}
        for _ in range(runs):
            for lib in libs:
                found[lib].append(measure(lib))
        medians = {lib: _median_of(results) for lib, results in found.items()}
        for lib, figures in medians.items():
            _show(f"{label} {lib}", figures)
        return medians

    if "drain" in only:
        for size in sizes:
            libs = [lib for lib in libraries if lib not in MOST_JOBS or size == min(sizes)]
            for mode in ("durable", "async"):
                report[f"drain_{size}_{mode}"] = interleaved(
                    f"drain {size} {mode}",
                    lambda lib, n=size, m=mode: drain(lib, n, best[lib], durable=m == "durable"),
                    libs,
                )
    if "enqueue" in only:
        report["enqueue"] = interleaved(
            "enqueue", lambda lib: enqueue(lib, single, bulk=False), libraries
        )
        report["bulk"] = interleaved(
            "bulk", lambda lib: enqueue(lib, bulk_jobs, bulk=True), libraries
        )
    if "latency" in only:
        report["latency"] = interleaved(
            "latency", lambda lib: latency(lib, latency_jobs), libraries
        )
    if "startup" in only:
        report["startup"] = interleaved("startup", lambda lib: startup(lib, 1), libraries)
    return report
