"""``python -m bench``: run the benchmark suite, print a table, write JSON.

    python -m bench                         # everything, PostgreSQL and SQLite, 3 runs each
    python -m bench --only drain latency --backends postgresql --runs 1
    python -m bench --quick                 # smaller sizes, for a first look
    python -m bench --only counts           # queue_counts over 1,000,000 finished rows
    python -m bench --only retention        # drain/enqueue with tombstones; a prune while draining
    python -m bench --only sync             # a SyncQueue call beside the async one (sync_cost)
    python -m bench --only drain_priority   # a mixed-priority backlog drained beside a plain one
    python -m bench --only drain_priority --priority-levels 3   # three priorities taking turns
    python -m bench --only drain_batch   # the same backlog as plain jobs and as batches
    python -m bench --only fairness --backends postgresql   # a small tenant behind 100,000 jobs
    python -m bench --only fairness --fairness-backlog 10000   # the same, smaller
    python -m bench --only drain limits     # the drain under each flow-control setting, and plans
    python -m bench --only compare          # Caravel and its peers at their best (bench/compare.py)
    python -m bench --only compare --compare sweep drain --libraries caravel pgqueuer

The drain is measured twice in every run, with asynchronous and with durable acknowledgements.

Each figure is the median of ``--runs`` runs, each on a fresh database.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import ceilings, compare, counts, fairness, limits_cost, retention, runs, sync_cost
from bench.databases import database, pg_setting

RESULTS = Path(__file__).resolve().parent / "results"
ALL = (
    "enqueue",
    "enqueue_parallel",
    "sync",
    "bulk",
    "drain",
    "drain_priority",
    "drain_batch",
    "steady",
    "latency",
    "history",
    "memory",
    "sql",
    "commit",
    "durability",
    "counts",
    "retention",
    "fairness",
    "limits",
    "compare",
)
#: The parts of the comparison with the peers (``--compare``).
COMPARE = ("sweep", "drain", "enqueue", "latency", "startup")


def _median(results: list[dict[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for key, value in results[0].items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            merged[key] = statistics.median(r[key] for r in results)
        else:
            merged[key] = value
    merged["runs"] = len(results)
    return merged


def _measure(backend: str, runs_: int, fn: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    results = []
    for _ in range(runs_):
        with database(backend) as url:
            results.append(fn(url))
    return _median(results)


#: The drain's two settings, measured in the same run: acknowledgements as the worker sends them
#: by default, and with ``WorkerOptions(durable_acks=True)``.
ACK_MODES = {"async_acks": False, "durable_acks": True}


def _drain_both(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    """The drain with each acknowledgement setting, the runs alternating between them (so a
    machine whose speed drifts during the run affects both alike), each on a fresh database."""
    modes: dict[str, dict[str, Any]] = {m: {"durable_acks": d} for m, d in ACK_MODES.items()}
    return _drain_modes(backend, args, modes)


def _drain_modes(
    backend: str, args: argparse.Namespace, modes: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """The drain of each setting ``modes`` names (keyword arguments of :func:`runs.drain`), the
    runs alternating between them, each on a fresh database: the medians, and each run's
    jobs/s (``jobs_per_second_runs_<mode>``, in the order they ran)."""
    results: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    for _ in range(args.runs):
        for mode, kwargs in modes.items():
            with database(backend) as url:
                run = runs.drain(url, args.jobs, args.concurrency, **kwargs)
                results[mode].append(asyncio.run(run))
    figures: dict[str, Any] = {"jobs": args.jobs, "concurrency": args.concurrency}
    for mode, measured in results.items():
        median = _median(measured)
        figures["runs"] = median["runs"]
        for key in ("jobs_per_second", "seconds", "completed"):
            figures[f"{key}_{mode}"] = median[key]
        figures[f"jobs_per_second_runs_{mode}"] = [run["jobs_per_second"] for run in measured]
    return figures


def _drain_priority(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    """A plain backlog (every job of priority 0) beside a mixed one (``--priority-levels``
    priorities taking turns, so claimed in another order than inserted)."""
    modes = {"plain": {}, "mixed": {"priority_levels": args.priority_levels}}
    return {**_drain_modes(backend, args, modes), "priority_levels": args.priority_levels}


def _drain_batch(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    """A plain backlog beside the same jobs as batches of 1,000: what counting each finish in
    its batch's row costs the acknowledgements."""
    return _drain_modes(backend, args, {"plain": {}, "batched": {"batches": True}})


def _retention(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    """Both retention measurements, once each (each needs two fresh databases)."""
    with database(backend) as empty, database(backend) as full, database(backend) as again:
        figures = retention.tombstones(
            empty, full, again, args.history, args.jobs, args.single, args.concurrency
        )
    with database(backend) as quiet, database(backend) as busy:
        during = retention.prune_during_drain(
            quiet, busy, args.history, args.prune_drain_jobs, args.concurrency
        )
    return {**figures, **{f"prune_{k}": v for k, v in during.items()}}


def _fairness(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    """A small tenant's waits behind a large backlog, fairness on and off, in one run."""
    with database(backend) as fair_url, database(backend) as plain_url:
        return asyncio.run(
            fairness.fairness(
                fair_url,
                plain_url,
                args.fairness_backlog,
                args.fairness_jobs,
                args.fairness_batch,
                args.fairness_rounds,
            )
        )


def _limits(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    """The drain under each flow-control setting beside the plain one, in one run, and the
    plans of one limited claim of a worker's batch (half its slots) over a large backlog."""
    figures = _drain_modes(backend, args, limits_cost.SETTINGS)
    rounds = {mode: figures[f"jobs_per_second_runs_{mode}"] for mode in limits_cost.SETTINGS}
    figures.update(limits_cost.ratios(figures, rounds))
    with database(backend) as url:
        batch = max(1, (args.concurrency + 1) // 2)  # as the worker claims
        figures["plans"] = asyncio.run(limits_cost.plans(url, args.limits_plan_backlog, batch))
    return figures


def _scenarios(args: argparse.Namespace) -> dict[str, Callable[[str], dict[str, Any]]]:
    n = args.jobs
    conc = args.concurrency

    def history(url: str) -> dict[str, Any]:
        runs.seed_history(url, args.history)
        return asyncio.run(runs.drain(url, n, conc))

    return {
        "enqueue": lambda url: asyncio.run(runs.enqueue_single(url, args.single)),
        "enqueue_parallel": lambda url: asyncio.run(
            runs.enqueue_single(url, args.single * 2, args.producers)
        ),
        "sync": lambda url: sync_cost.measure(url, args.single, 5),
        "bulk": lambda url: asyncio.run(runs.enqueue_bulk(url, n)),
        "steady": lambda url: asyncio.run(runs.steady(url, args.seconds, 2, conc)),
        "latency": lambda url: runs.latency(url, args.latency_jobs, 0.01),
        "history": history,
        "memory": lambda url: runs.memory(url, args.memory_jobs, conc),
        "sql": lambda url: ceilings.sql_limit(url, n, args.batch),
        "commit": lambda url: ceilings.sqlite_commit_limit(url),
        "durability": lambda url: ceilings.durability(url),
        "counts": lambda url: counts.counts(url, args.history),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--backends", nargs="+", default=["postgresql", "sqlite"])
    parser.add_argument("--only", nargs="+", choices=ALL, default=list(ALL))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per drain/bulk run")
    parser.add_argument(
        "--priority-levels",
        type=int,
        default=201,
        help="drain_priority: how many priorities (-100 to 100, evenly spread) take turns",
    )
    parser.add_argument("--single", type=int, default=2_000, help="jobs for one-call enqueue")
    parser.add_argument("--concurrency", type=int, default=1000, help="worker concurrency")
    parser.add_argument(
        "--producers", type=int, default=16, help="concurrent callers for enqueue_parallel"
    )
    parser.add_argument("--batch", type=int, default=100, help="plain-SQL batch size")
    parser.add_argument("--seconds", type=float, default=10.0, help="steady-state duration")
    parser.add_argument("--latency-jobs", type=int, default=1000)
    parser.add_argument("--history", type=int, default=1_000_000, help="retained rows")
    parser.add_argument("--memory-jobs", type=int, default=500_000)
    parser.add_argument(
        "--prune-drain-jobs", type=int, default=200_000, help="ready jobs drained during a prune"
    )
    parser.add_argument(
        "--libraries", nargs="+", default=list(compare.GRIDS), help="for --only compare"
    )
    parser.add_argument("--compare", nargs="+", choices=COMPARE, default=list(COMPARE))
    parser.add_argument(
        "--compare-sizes", nargs="+", type=int, default=[20_000, 100_000], help="drain backlogs"
    )
    parser.add_argument(
        "--fairness-backlog", type=int, default=100_000, help="fairness: tenant A's ready jobs"
    )
    parser.add_argument(
        "--fairness-jobs", type=int, default=100, help="fairness: tenant B's jobs, one by one"
    )
    parser.add_argument("--fairness-batch", type=int, default=100, help="fairness: claim batch")
    parser.add_argument(
        "--fairness-rounds",
        type=int,
        default=None,
        help="fairness: stop after this many claims (default: enough to drain the backlog)",
    )
    parser.add_argument(
        "--limits-plan-backlog",
        type=int,
        default=100_000,
        help="limits: ready jobs behind the claims whose plans are taken",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, one run")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.jobs, args.single = 1, 5_000, 500
        args.history, args.memory_jobs, args.latency_jobs, args.seconds = 100_000, 60_000, 100, 5
        args.prune_drain_jobs = 20_000
        args.fairness_backlog = 10_000
        args.limits_plan_backlog = 10_000
        args.compare_sizes = [5_000]

    report: dict[str, Any] = {
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "settings": {k: v for k, v in vars(args).items() if k not in ("backends", "only")},
        "postgresql": {
            "server_version": pg_setting("server_version"),
            "synchronous_commit": pg_setting("synchronous_commit"),
            "fsync": pg_setting("fsync"),
        },
        "results": {},
    }
    for backend in args.backends:
        scenarios = _scenarios(args)
        for name in args.only:
            if name == "commit" and backend != "sqlite":
                continue
            if name == "durability" and backend != "postgresql":
                continue
            if name == "compare":
                if backend == "postgresql":
                    print("postgresql compare ...", flush=True)
                    report["compare"] = compare.comparison(
                        args.libraries,
                        args.compare_sizes,
                        args.runs,
                        single=args.single,
                        bulk_jobs=args.jobs,
                        latency_jobs=args.latency_jobs,
                        sweep_jobs=min(args.compare_sizes),
                        only=set(args.compare),
                    )
                continue
            print(f"{backend:10} {name:8} ...", flush=True)
            if name == "drain":
                figures = _drain_both(backend, args)
            elif name == "drain_priority":
                figures = _drain_priority(backend, args)
            elif name == "drain_batch":
                figures = _drain_batch(backend, args)
            elif name == "retention":
                figures = _retention(backend, args)
            elif name == "fairness":
                figures = _fairness(backend, args)
            elif name == "limits":
                figures = _limits(backend, args)
            else:
                figures = _measure(backend, 1 if name == "memory" else args.runs, scenarios[name])
            report["results"].setdefault(backend, {})[name] = figures
            shown = ", ".join(
                f"{k}={v:,.1f}"
                if isinstance(v, float) and abs(v) >= 10
                else f"{k}={v:.3g}"
                if isinstance(v, float)
                else f"{k}={v}"
                for k, v in figures.items()
                if not isinstance(v, dict)  # the plans: in the JSON
            )
            print(f"{backend:10} {name:8} {shown}", flush=True)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(report, indent=2), encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
