"""``python -m bench``: run the benchmark suite, print a table, write JSON.

    python -m bench                         # everything, PostgreSQL and SQLite, 3 runs each,
                                            # and MariaDB's rows when its server answers
    python -m bench --backends mariadb --only enqueue bulk drain latency commit
    python -m bench --only drain latency --backends postgresql --runs 1
    python -m bench --quick                 # smaller sizes, for a first look
    python -m bench --only counts           # queue_counts over 1,000,000 finished rows
    python -m bench --only scrape           # the autoscaling signal over 1,000,000 finished rows
    python -m bench --only replication      # a standby's cost, async and synchronous (PostgreSQL)
    python -m bench --only notify --backends postgresql   # 32 producers, wake-ups on and off
    python -m bench --only retention        # drain/enqueue with tombstones; a prune while draining
    python -m bench --only churn            # rates at 0, 1M, 5M finished rows and 1M tombstones;
                                            # every dashboard, inspector and CLI read, empty and
                                            # at 3M finished rows
    python -m bench --only sync             # a SyncQueue call beside the async one (sync_cost)
    python -m bench --only bridge           # RabbitMQ's and NATS JetStream's egress and ingress
                                            # beside their raw clients
    python -m bench --only drain_priority   # a mixed-priority backlog drained beside a plain one
    python -m bench --only drain_priority --priority-levels 3   # three priorities taking turns
    python -m bench --only drain_batch   # the same backlog as plain jobs and as batches
    python -m bench --only workflow      # a 10,000-wide fan-out/fan-in beside a plain drain
    python -m bench --only fairness --backends postgresql   # a small tenant behind 100,000 jobs
    python -m bench --only fairness --fairness-backlog 10000   # the same, smaller
    python -m bench --only drain limits     # the drain under each flow-control setting, and plans
    python -m bench --only compare          # Caravel and its peers at their best (bench/compare.py)
    python -m bench --only compare --compare sweep drain --libraries caravel pgqueuer
    python -m bench --only compare --compare drain --libraries graphile caravel --runs 1
    python -m bench --only compare --backends postgresql --sittings 3   # the page's sittings
    python -m bench --only compare --backends postgresql --settings-from bench/results/X.json

The comparison ends by printing the tables of docs/performance.md (bench/page.py) over its
sittings: with ``--sittings N`` it runs N times, the sweep only in the first (the others reuse the
settings it chose), each sitting writing its own JSON.

The drain is measured twice in every run, with asynchronous and with durable acknowledgements
(on MariaDB once: every commit there is durable as the server is configured).

MariaDB (``CARAVEL_BENCH_MARIADB_URL``, by default the local server) runs the scenarios of
``MARIADB``: the others need SQL of PostgreSQL's or SQLite's. Its ``latency`` is that of a
worker that polls, at the default poll interval and at a short one, and its ``commit`` the
server's own durable commit rate for one client through the bare drivers. Without ``--backends``
its rows are left out, with the reason, when the server does not answer (``--if-reachable``
does the same for the backends named); under ``CI=true`` that is an error instead.

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

from bench import (
    bridge_cost,
    bridge_nats_cost,
    ceilings,
    churn,
    compare,
    counts,
    fairness,
    limits_cost,
    notify_cost,
    page,
    replication_cost,
    retention,
    runs,
    scrape_cost,
    sitting,
    sync_cost,
    wakeup,
)
from bench.databases import (
    IN_CI,
    database,
    mariadb_settings,
    mariadb_unreachable,
    pg_setting,
)

RESULTS = Path(__file__).resolve().parent / "results"
ALL = (
    "enqueue",
    "enqueue_parallel",
    "sync",
    "bulk",
    "drain",
    "drain_priority",
    "drain_batch",
    "workflow",
    "steady",
    "latency",
    "history",
    "memory",
    "sql",
    "commit",
    "durability",
    "counts",
    "scrape",
    "replication",
    "notify",
    "retention",
    "churn",
    "fairness",
    "limits",
    "bridge",
    "compare",
)
#: The parts of the comparison with the peers (``--compare``).
COMPARE = ("sweep", "drain", "enqueue", "latency", "startup")
#: The scenarios that run on MariaDB; the others use SQL of PostgreSQL's or SQLite's.
MARIADB = (
    "enqueue",
    "enqueue_parallel",
    "sync",
    "bulk",
    "drain",
    "workflow",
    "steady",
    "latency",
    "commit",
)
#: Whose rows each scenario has (the others run on every backend named).
ONLY_ON = {
    "commit": ("sqlite", "mariadb"),
    "durability": ("postgresql",),
    "notify": ("postgresql",),
    "replication": ("postgresql",),
    "bridge": ("sqlite", "postgresql"),
}


def _median(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Each number the median of the runs'; ``each_run`` the runs' own figures, for their
    spread."""
    merged: dict[str, Any] = {}
    for key, value in results[0].items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            merged[key] = statistics.median(r[key] for r in results)
        else:
            merged[key] = value
    merged["runs"] = len(results)
    if len(results) > 1:
        merged["each_run"] = results
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
    machine whose speed drifts during the run affects both alike), each on a fresh database.
    On MariaDB only the durable one: InnoDB commits every transaction as the server is
    configured to (``innodb_flush_log_at_trx_commit`` is global), so the two are the same."""
    modes: dict[str, dict[str, Any]] = {m: {"durable_acks": d} for m, d in ACK_MODES.items()}
    if backend == "mariadb":
        modes = {"durable_acks": {"durable_acks": True}}
    return _drain_modes(backend, args, modes)


#: A polling worker's wake-up (MariaDB has no LISTEN/NOTIFY), each setting: the worker's
#: ``--poll-interval`` (1 s is the default; the worker looks again 50 ms after finding work and
#: backs off to it), the shortest pause between jobs and how much longer one may be, at
#: random, and whether it is the ``--idle-jobs`` count (pauses long enough for the worker to
#: back off fully) or ``--poll-jobs``.
POLLING = {
    "busy_default": (1.0, 0.0, 0.1, False),
    "idle_default": (1.0, 2.0, 1.0, True),
    "busy_short": (0.05, 0.0, 0.1, False),
}


def _polling_latency(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    """What a worker in another process sees of each enqueue when it polls: from the enqueue's
    commit (and from just before its call) to the handler's start, for each of ``POLLING``'s
    settings, ``--runs`` times, each run on a fresh database with the settings in turn."""
    measured: dict[str, list[dict[str, Any]]] = {name: [] for name in POLLING}
    for run in range(args.runs):
        with database(backend) as url:
            for name, (poll, gap, jitter, idle) in POLLING.items():
                jobs = args.idle_jobs if idle else args.poll_jobs
                found = wakeup.latency(
                    url,
                    jobs,
                    gap,
                    poll_interval=poll,
                    jitter=jitter,
                    seed=run + 1,
                    warm_up=2 if idle else wakeup.WARM_UP,
                )
                measured[name].append(found)
    figures: dict[str, Any] = {"runs": args.runs}
    keys = ("p50_ms", "p95_ms", "p99_ms", "max_ms", "enqueue_call_p50_ms")
    keys += ("after_commit_p50_ms", "after_commit_p95_ms", "after_commit_p99_ms")
    keys += ("after_commit_max_ms",)
    for name, runs_ in measured.items():
        poll, gap, jitter, _ = POLLING[name]
        figures[f"{name}_poll_interval_s"] = poll
        figures[f"{name}_pause_ms"] = [gap * 1000, (gap + jitter) * 1000]
        figures[f"{name}_jobs"] = runs_[0]["jobs"]
        for key in keys:
            figures[f"{name}_{key}"] = statistics.median(r[key] for r in runs_)
        for key in ("after_commit_p50_ms", "after_commit_p99_ms"):
            figures[f"{name}_{key}_runs"] = [round(r[key], 2) for r in runs_]
    return figures


#: A workflow drain's waits on its releases (``runs._releases``), reported when measured.
RELEASES = ("start_to_root_s", "root_to_first_member_s", "last_member_to_fan_in_s")


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
        for key in ("jobs_per_second", "seconds", "completed", "enqueue_seconds", *RELEASES):
            if key in median:
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


def _workflow(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    """A plain backlog beside the same number of jobs as one workflow: a root, ``--workflow-width``
    members after it and one fan-in after them all (``runs.fan_out_fan_in``), drained by one
    worker with the same settings, alternating on fresh databases. What releasing costs: each
    member's finish satisfies its edge and counts down the fan-in's counter in the same
    statement, and the drain waits for the root's release of the members and the last member's
    release of the fan-in. ``ratio`` is the workflow's jobs/s over the plain drain's (medians),
    ``ratio_runs`` each round's."""
    sized = argparse.Namespace(**{**vars(args), "jobs": args.workflow_width + 2})
    figures = _drain_modes(backend, sized, {"plain": {}, "workflow": {"workflow": True}})
    figures["width"] = args.workflow_width
    figures["ratio"] = figures["jobs_per_second_workflow"] / figures["jobs_per_second_plain"]
    figures["ratio_runs"] = [
        round(w / p, 3)
        for w, p in zip(
            figures["jobs_per_second_runs_workflow"],
            figures["jobs_per_second_runs_plain"],
            strict=True,
        )
    ]
    return figures


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


def _churn(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    """Rates and reads as finished jobs and tombstones pile up (bench/churn.py), in one run
    (the rates the median of ``--runs`` rounds at each size)."""
    return churn.churn(
        backend,
        args.churn_sizes,
        args.churn_read_rows,
        args.churn_tombstones,
        args.jobs,
        args.single,
        args.concurrency,
        args.runs,
    )


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

    def bulk(url: str) -> dict[str, Any]:
        figures = asyncio.run(runs.enqueue_bulk(url, n))
        if url.startswith("mariadb"):
            # The floor, in the same database after Caravel's rows: the bare driver's
            # multi-row INSERT of copies of a row Caravel wrote (PostgreSQL's is a bare COPY).
            floor = ceilings.mariadb_bulk_floor(url, n)
            figures["floor_jobs_per_second"] = floor["jobs_per_second"]
            figures["share_of_floor"] = figures["jobs_per_second"] / floor["jobs_per_second"]
        return figures

    def commit(url: str) -> dict[str, Any]:
        if url.startswith("mariadb"):
            return ceilings.mariadb_commit_limit(url, args.single)
        return ceilings.sqlite_commit_limit(url)

    def bridge(url: str) -> dict[str, Any]:
        # RabbitMQ's figures, then NATS JetStream's under a nats_ prefix, in the same run.
        figures = asyncio.run(bridge_cost.measure(url, args.jobs // 2))
        nats = asyncio.run(bridge_nats_cost.measure(url, args.jobs // 2))
        return {**figures, **{f"nats_{name}": value for name, value in nats.items()}}

    return {
        "enqueue": lambda url: asyncio.run(runs.enqueue_single(url, args.single)),
        "enqueue_parallel": lambda url: asyncio.run(
            runs.enqueue_single(url, args.single * 2, args.producers)
        ),
        "sync": lambda url: sync_cost.measure(url, args.single, 5),
        "bridge": bridge,
        "bulk": bulk,
        "steady": lambda url: asyncio.run(runs.steady(url, args.seconds, 2, conc)),
        "latency": lambda url: runs.latency(url, args.latency_jobs, 0.01),
        "history": history,
        "memory": lambda url: runs.memory(url, args.memory_jobs, conc),
        "sql": lambda url: ceilings.sql_limit(url, n, args.batch),
        "commit": commit,
        "durability": lambda url: ceilings.durability(url),
        "counts": lambda url: counts.counts(url, args.history),
        "scrape": lambda url: scrape_cost.scrape(url, args.history, scrapes=args.scrapes),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "--backends",
        nargs="+",
        choices=BACKENDS,
        default=None,
        help="default: postgresql and sqlite, and mariadb when its server answers",
    )
    parser.add_argument(
        "--if-reachable",
        action="store_true",
        help="leave out, with the reason, a named backend whose server does not answer "
        "(under CI=true: an error)",
    )
    parser.add_argument("--only", nargs="+", choices=ALL, default=list(ALL))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per drain/bulk run")
    parser.add_argument(
        "--priority-levels",
        type=int,
        default=201,
        help="drain_priority: how many priorities (-100 to 100, evenly spread) take turns",
    )
    parser.add_argument(
        "--workflow-width",
        type=int,
        default=10_000,
        help="workflow: the fan-out's members (the drain has two jobs more: root and fan-in)",
    )
    parser.add_argument("--single", type=int, default=2_000, help="jobs for one-call enqueue")
    parser.add_argument(
        "--notify-producers", type=int, default=32, help="concurrent callers for notify"
    )
    parser.add_argument("--concurrency", type=int, default=1000, help="worker concurrency")
    parser.add_argument(
        "--producers", type=int, default=16, help="concurrent callers for enqueue_parallel"
    )
    parser.add_argument("--batch", type=int, default=100, help="plain-SQL batch size")
    parser.add_argument("--seconds", type=float, default=10.0, help="steady-state duration")
    parser.add_argument("--latency-jobs", type=int, default=1000)
    parser.add_argument(
        "--poll-jobs",
        type=int,
        default=300,
        help="MariaDB latency: jobs per setting with short pauses (the worker polls often)",
    )
    parser.add_argument(
        "--idle-jobs",
        type=int,
        default=40,
        help="MariaDB latency: jobs 2 to 3 s apart (the worker backed off to its interval)",
    )
    parser.add_argument("--history", type=int, default=1_000_000, help="retained rows")
    parser.add_argument(
        "--churn-sizes",
        nargs="+",
        type=int,
        default=[1_000_000, 5_000_000],
        help="churn: finished rows the rates are measured at (besides 0)",
    )
    parser.add_argument(
        "--churn-read-rows", type=int, default=3_000_000, help="churn: finished rows for the reads"
    )
    parser.add_argument(
        "--churn-tombstones", type=int, default=1_000_000, help="churn: tombstones for the rates"
    )
    parser.add_argument(
        "--scrapes", type=int, default=1_000, help="scrape: requests to the served endpoint"
    )
    parser.add_argument(
        "--replication-commits",
        type=int,
        default=1_000,
        help="replication: bare one-row commits timed in each mode",
    )
    parser.add_argument(
        "--replication-modes",
        nargs="+",
        choices=list(replication_cost.MODES),
        default=list(replication_cost.MODES),
        help="replication: the modes measured (no_standby always)",
    )
    parser.add_argument("--memory-jobs", type=int, default=500_000)
    parser.add_argument(
        "--prune-drain-jobs", type=int, default=200_000, help="ready jobs drained during a prune"
    )
    parser.add_argument(
        "--libraries",
        nargs="+",
        choices=list(compare.GRIDS),
        default=list(compare.GRIDS),
        help="for --only compare",
    )
    parser.add_argument(
        "--compare",
        nargs="+",
        choices=COMPARE,
        default=None,
        help="parts of the comparison (default: all; with --quick, all but the sweep)",
    )
    parser.add_argument(
        "--sittings",
        type=int,
        default=1,
        help="run the comparison this many times, the sweep only in the first",
    )
    parser.add_argument(
        "--settings-from",
        type=Path,
        default=None,
        help="a report whose sweep's settings the comparison uses instead of sweeping",
    )
    parser.add_argument(
        "--resweep",
        nargs="+",
        default=[],
        metavar="LIBRARY",
        help="with --settings-from: sweep these libraries again (their grids grew), reuse the rest",
    )
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
    parser.add_argument(
        "--results", type=Path, default=RESULTS, help="the folder the JSON reports go to"
    )
    args = parser.parse_args()
    if args.sittings < 1:
        parser.error(f"--sittings must be at least 1, not {args.sittings}")
    if args.sittings > 1 and "compare" not in args.only:
        print(f"--sittings {args.sittings} repeats only the comparison, not in --only: one sitting")
        args.sittings = 1
    if args.compare is None:
        args.compare = [p for p in COMPARE if not (args.quick and p == "sweep")]
    chosen, args.earlier_sweeps = None, {}
    if args.settings_from:
        chosen, args.earlier_sweeps = _settings_from(parser, args.settings_from)
        chosen = {lib: found for lib, found in chosen.items() if lib not in args.resweep}
    if chosen is not None and not args.resweep and "sweep" in args.compare:
        args.compare.remove("sweep")
    if args.quick:
        args.runs, args.jobs, args.single = 1, 5_000, 500
        args.history, args.memory_jobs, args.latency_jobs, args.seconds = 100_000, 60_000, 100, 5
        args.poll_jobs, args.idle_jobs = 50, 6
        args.prune_drain_jobs = 20_000
        args.workflow_width = 2_000
        args.scrapes, args.replication_commits = 200, 200
        args.fairness_backlog = 10_000
        args.limits_plan_backlog = 10_000
        args.churn_sizes, args.churn_read_rows, args.churn_tombstones = [20_000], 10_000, 10_000
        args.compare_sizes = [5_000]

    args.backends = _reachable(parser, args.backends, args.if_reachable)
    if not args.backends:
        return
    report = _sitting(args, args.only, args.backends, chosen)
    compared = "compare" in report
    written = [_write(args.results, report, 1 if args.sittings > 1 else None)]
    if compared:
        chosen = report["compare"]["settings"]
        args.compare = [p for p in args.compare if p != "sweep"]
    for number in range(2, args.sittings + 1):
        print(f"sitting {number} of {args.sittings}", flush=True)
        again = _sitting(args, ["compare"], ["postgresql"], chosen)
        written.append(_write(args.results, again, number))
    if compared:
        print()
        print(page.render([page.load(path) for path in written]))


#: Every backend ``--backends`` takes; MariaDB's rows are left out when its server does not answer
#: and it was not named (or ``--if-reachable``).
BACKENDS = ("postgresql", "sqlite", "mariadb")


def _reachable(
    parser: argparse.ArgumentParser, named: list[str] | None, if_reachable: bool
) -> list[str]:
    """The backends to measure: those named (by default all of :data:`BACKENDS`), less
    MariaDB when its server does not answer and it may be left out (not named, or
    ``--if-reachable``), saying why. Under ``CI=true``, or when it was named without
    ``--if-reachable``, a server that does not answer is an error."""
    backends = list(named or BACKENDS)
    if "mariadb" not in backends:
        return backends
    reason = mariadb_unreachable()
    if reason is None:
        return backends
    optional = named is None or if_reachable
    if IN_CI or not optional:
        parser.error(
            f"{reason}. Start it, set CARAVEL_BENCH_MARIADB_URL, or leave mariadb out of --backends"
        )
    print(f"MariaDB's rows are left out: {reason}", flush=True)
    return [b for b in backends if b != "mariadb"]


def _settings_from(
    parser: argparse.ArgumentParser, path: Path
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """The settings an earlier report's comparison ran each library at, and the records of the
    sweeps that chose them (none when it reused settings itself)."""
    try:
        compared = json.loads(path.read_text(encoding="utf-8"))["compare"]
        settings = dict(compared["settings"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        parser.error(f"--settings-from {path}: no comparison's settings in it ({exc})")
    return settings, dict(compared.get("sweep", {}))


def _sitting(
    args: argparse.Namespace,
    only: list[str],
    backends: list[str],
    chosen: dict[str, dict[str, Any]] | None,
) -> dict[str, Any]:
    """One run of the scenarios ``only`` names on ``backends``: the report."""
    report: dict[str, Any] = {
        "sitting": sitting.begin(),
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "settings": {
            k: str(v) if isinstance(v, Path) else v
            for k, v in vars(args).items()
            if k not in ("backends", "only")
        },
        "postgresql": {
            "server_version": pg_setting("server_version"),
            "synchronous_commit": pg_setting("synchronous_commit"),
            "fsync": pg_setting("fsync"),
        },
        "results": {},
    }
    if "mariadb" in backends:
        report["mariadb"] = mariadb_settings()
    for backend in backends:
        scenarios = _scenarios(args)
        for name in only:
            if backend not in ONLY_ON.get(name, BACKENDS):
                continue
            if backend == "mariadb" and name not in MARIADB:
                print(f"{backend:10} {name:8} not measured on MariaDB", flush=True)
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
                        chosen=chosen,
                        earlier_sweeps=args.earlier_sweeps,
                    )
                continue
            print(f"{backend:10} {name:8} ...", flush=True)
            if name == "drain":
                figures = _drain_both(backend, args)
            elif name == "drain_priority":
                figures = _drain_priority(backend, args)
            elif name == "drain_batch":
                figures = _drain_batch(backend, args)
            elif name == "workflow":
                figures = _workflow(backend, args)
            elif name == "retention":
                figures = _retention(backend, args)
            elif name == "fairness":
                figures = _fairness(backend, args)
            elif name == "churn":
                figures = _churn(backend, args)
            elif name == "limits":
                figures = _limits(backend, args)
            elif name == "latency" and backend == "mariadb":
                figures = _polling_latency(backend, args)
            elif name == "notify":
                # Its own fresh databases, one per setting and run (bench/notify_cost.py).
                figures = notify_cost.notify_cost(args.single * 2, args.notify_producers, args.runs)
            elif name == "replication":
                # A private primary and standby of its own (bench/replication_cost.py).
                figures = replication_cost.replication_cost(args, args.replication_modes)
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
                if not isinstance(v, dict) and k != "each_run"  # the plans, the runs: JSON
            )
            print(f"{backend:10} {name:8} {shown}", flush=True)
    sitting.end(report["sitting"])
    return report


def _write(folder: Path, report: dict[str, Any], number: int | None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    suffix = f"-sitting-{number}" if number is not None else ""
    out = folder / f"{time.strftime('%Y%m%d-%H%M%S')}{suffix}.json"
    out.write_text(json.dumps(report, indent=2), encoding="utf-8")
    print(f"wrote {out}", flush=True)
    return out


if __name__ == "__main__":
    main()
