"""``python -m bench.churn_soak``: dead rows, table sizes and autovacuum over a sustained run
(issue 35).

Worker processes (``caravel worker``, pruning completed jobs older than ``--retain`` every
``--prune-interval``) drain the bench queue while this process enqueues no-op jobs at half the
drain rate measured first (or at ``--rate``). Every ``--sample-seconds`` it records the backlog,
the rates achieved since the previous sample, and:

- PostgreSQL, on a throwaway cluster of its own with autovacuum on: per ``caravel_*`` table its
  live and dead rows, heap, index and total sizes, autovacuum and autoanalyze counts and the last
  autovacuum. ``--autovacuum table`` keeps the per-table settings the migrations set;
  ``--autovacuum default`` resets them, so the server's defaults apply.
- SQLite: the file's size, ``page_count``, ``freelist_count`` and the WAL file's size.

The JSON report goes to ``bench/results/`` and a compact table is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from bench import runs
from bench.apps import Noop, registry, worker_command
from bench.databases import postgres_dsn
from caravel import DatabaseQueue
from caravel import migrate as migrations

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
#: The per-table storage parameters a ``default`` run resets (those 0002 and 0020 set).
VACUUM_PARAMETERS = (
    "autovacuum_vacuum_scale_factor",
    "autovacuum_analyze_scale_factor",
    "autovacuum_vacuum_cost_delay",
)
#: Server settings of the throwaway cluster on top of tests/faults/pgserver.py's own: autovacuum
#: on (the server default, said explicitly: the machine's shared server runs with it off), and
#: every autovacuum run logged.
CLUSTER_SETTINGS = {"autovacuum": "on", "log_autovacuum_min_duration": "0"}

_PG_TABLES = """
SELECT s.relname, s.n_live_tup, s.n_dead_tup, s.n_tup_ins, s.n_tup_upd, s.n_tup_hot_upd,
       s.n_tup_del, s.autovacuum_count, s.autoanalyze_count, s.last_autovacuum,
       pg_total_relation_size(s.relid), pg_relation_size(s.relid), pg_indexes_size(s.relid)
FROM pg_stat_user_tables s
WHERE s.relname LIKE 'caravel\\_%' AND s.relname <> 'caravel_alembic_version'
ORDER BY s.relname
"""
_PG_OPTIONS = """
SELECT relname, coalesce(reloptions, '{}') FROM pg_class
WHERE relkind = 'r' AND relname LIKE 'caravel\\_%' ORDER BY relname
"""
#: Jobs not finished yet: finished rows are exactly those without ``available_at``.
_BACKLOG = "SELECT count(*) FROM caravel_jobs WHERE available_at IS NOT NULL"


# ----- the database ---------------------------------------------------------------------------


@contextlib.contextmanager
def _postgresql(autovacuum: str) -> Iterator[tuple[str, Any]]:
    """A migrated database on a throwaway cluster with autovacuum on: (its URL, the cluster)."""
    sys.path.insert(0, str(ROOT))
    from tests.faults.pgserver import PrivateCluster

    cluster = PrivateCluster.create(settings=CLUSTER_SETTINGS)
    try:
        with cluster.database(migrated=False) as url:
            migrations.upgrade(url)
            if autovacuum == "default":
                with psycopg.connect(postgres_dsn(url), autocommit=True) as conn:
                    for table, _options in conn.execute(_PG_OPTIONS).fetchall():
                        conn.execute(  # type: ignore[call-overload]
                            f"ALTER TABLE {table} RESET ({', '.join(VACUUM_PARAMETERS)})"
                        )
            yield url, cluster
    finally:
        cluster.destroy()


@contextlib.contextmanager
def _sqlite() -> Iterator[tuple[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="caravel-churn-") as folder:
        url = f"sqlite:///{Path(folder) / 'queue.db'}"
        migrations.upgrade(url)
        yield url, None


def table_options(url: str) -> dict[str, list[str]]:
    """Each caravel table's storage parameters (PostgreSQL's ``reloptions``)."""
    with psycopg.connect(postgres_dsn(url), autocommit=True) as conn:
        return {name: list(options) for name, options in conn.execute(_PG_OPTIONS).fetchall()}


# ----- samples --------------------------------------------------------------------------------


def _backlog(url: str) -> int:
    if url.startswith("sqlite"):
        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as lite:
            return int(lite.execute(_BACKLOG).fetchone()[0])
    with psycopg.connect(postgres_dsn(url), autocommit=True) as conn:
        row = conn.execute(_BACKLOG).fetchone()
    return int(row[0]) if row else 0


def storage(url: str) -> dict[str, Any]:
    """What the database holds on disk right now (see the module's docstring)."""
    if url.startswith("sqlite"):
        path = Path(url.removeprefix("sqlite:///"))
        wal = path.with_name(path.name + "-wal")
        with contextlib.closing(sqlite3.connect(path)) as lite:
            pages = int(lite.execute("PRAGMA page_count").fetchone()[0])
            free = int(lite.execute("PRAGMA freelist_count").fetchone()[0])
            size = int(lite.execute("PRAGMA page_size").fetchone()[0])
        return {
            "file_bytes": path.stat().st_size,
            "page_size": size,
            "page_count": pages,
            "freelist_count": free,
            "wal_bytes": wal.stat().st_size if wal.exists() else 0,
        }
    tables = {}
    with psycopg.connect(postgres_dsn(url), autocommit=True) as conn:
        for row in conn.execute(_PG_TABLES).fetchall():
            name, live, dead, ins, upd, hot, deleted, av, aa, last, total, heap, index = row
            tables[name] = {
                "live": live, "dead": dead, "inserted": ins, "updated": upd, "hot_updated": hot,
                "deleted": deleted, "autovacuums": av, "autoanalyzes": aa,
                "last_autovacuum": last.isoformat() if last else None,
                "total_bytes": total, "heap_bytes": heap, "index_bytes": index,
            }  # fmt: skip
    return {"tables": tables}


# ----- the run --------------------------------------------------------------------------------


def _workers(url: str, n: int, concurrency: int, retain: str, every: str) -> list[Any]:
    flags = ["--concurrency", str(concurrency), "--completed", retain, "--prune-interval", every]
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'src'}"}
    return [
        subprocess.Popen(
            worker_command(url, *flags),
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(n)
    ]


async def _calibrate(queue: DatabaseQueue, url: str, jobs: int) -> float:
    """Jobs per second the running workers drain: a backlog of ``jobs`` is enqueued at once,
    and timed from when a tenth of it is done (the workers warm) to when nine tenths are (the
    backlog read at either moment, as the workers drain while it is enqueued)."""
    await runs.fill_backlog(queue, jobs)
    marks: dict[float, tuple[float, int]] = {}  # share of the backlog -> (when, backlog)
    left = jobs
    while left > 0:  # the run starts with an empty queue
        left = await asyncio.to_thread(_backlog, url)
        for share in (0.9, 0.1):
            if left <= jobs * share and share not in marks:
                marks[share] = (time.perf_counter(), left)
        await asyncio.sleep(0.05)  # polling the real database while real workers drain
    (began, high), (ended, low) = marks[0.9], marks[0.1]
    return (high - low) / max(ended - began, 1e-6)


async def _churn(url: str, args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {"samples": []}
    workers = _workers(url, args.workers, args.concurrency, args.retain, args.prune_interval)
    try:
        async with DatabaseQueue(url, registry) as queue:
            if args.rate:
                rate = float(args.rate)
            else:
                drain = await _calibrate(queue, url, args.calibrate_jobs)
                report["drain_jobs_per_second"] = drain
                rate = drain / 2
            report["enqueue_jobs_per_second_target"] = rate
            began = time.perf_counter()
            duration = args.minutes * 60
            enqueued = 0
            last = (0.0, 0, 0)  # seconds, enqueued, completed at the previous sample
            next_sample = 0.0
            while True:
                elapsed = time.perf_counter() - began
                if elapsed >= next_sample:
                    backlog = await asyncio.to_thread(_backlog, url)
                    completed = enqueued - backlog
                    window = max(elapsed - last[0], 1e-6)
                    sample = {
                        "seconds": round(elapsed, 1),
                        "enqueued": enqueued,
                        "backlog": backlog,
                        "enqueued_per_second": (enqueued - last[1]) / window,
                        "completed_per_second": (completed - last[2]) / window,
                        **await asyncio.to_thread(storage, url),
                    }
                    report["samples"].append(sample)
                    print(_line(sample), flush=True)
                    last = (elapsed, enqueued, completed)
                    next_sample += args.sample_seconds
                    if elapsed >= duration:
                        break
                due = min(int(rate * elapsed), int(rate * duration)) - enqueued
                for start in range(0, due, 1000):
                    n = min(1000, due - start)
                    await queue.enqueue_many(
                        [(Noop(enqueued + i), runs.dispatch()) for i in range(n)]
                    )
                    enqueued += n
                await asyncio.sleep(0.1)  # pacing the producer, not waiting on a result
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
    return report


def _line(sample: dict[str, Any]) -> str:
    head = (
        f"{sample['seconds']:7.0f}s backlog {sample['backlog']:7d}"
        f" enq/s {sample['enqueued_per_second']:7.1f} done/s {sample['completed_per_second']:7.1f}"
    )
    if "tables" not in sample:
        mib = sample["file_bytes"] / 2**20
        return (
            f"{head} file {mib:7.1f} MiB pages {sample['page_count']:7d}"
            f" free {sample['freelist_count']:6d} wal {sample['wal_bytes'] / 2**20:6.1f} MiB"
        )
    jobs = sample["tables"].get("caravel_jobs", {})
    attempts = sample["tables"].get("caravel_attempts", {})
    return (
        f"{head} jobs live {jobs.get('live', 0):7d} dead {jobs.get('dead', 0):6d}"
        f" {jobs.get('total_bytes', 0) / 2**20:6.1f} MiB av {jobs.get('autovacuums', 0):3d}"
        f" | attempts dead {attempts.get('dead', 0):6d}"
        f" {attempts.get('total_bytes', 0) / 2**20:6.1f} MiB av {attempts.get('autovacuums', 0):3d}"
    )


def summarize(report: dict[str, Any]) -> dict[str, Any]:
    """Per table (PostgreSQL) or for the file (SQLite): the figures docs/performance.md gives."""
    samples = report["samples"]
    if not samples:
        return {}
    third = max(1, len(samples) // 3)
    summary: dict[str, Any] = {
        "samples": len(samples),
        "backlog_max": max(s["backlog"] for s in samples),
        "backlog_final": samples[-1]["backlog"],
        "enqueued": samples[-1]["enqueued"],
        "enqueued_per_second": samples[-1]["enqueued"] / max(samples[-1]["seconds"], 1e-6),
        "completed_per_second": (samples[-1]["enqueued"] - samples[-1]["backlog"])
        / max(samples[-1]["seconds"], 1e-6),
    }
    if "tables" not in samples[0]:
        for key in ("file_bytes", "page_count", "freelist_count", "wal_bytes"):
            summary[key] = {
                "start": samples[0][key],
                "end": samples[-1][key],
                "max": max(s[key] for s in samples),
                "max_last_third": max(s[key] for s in samples[-third:]),
            }
        return summary
    tables: dict[str, Any] = {}
    for name in samples[-1]["tables"]:
        rows = [s["tables"][name] for s in samples if name in s["tables"]]
        tables[name] = {
            "dead_max": max(r["dead"] for r in rows),
            "dead_final": rows[-1]["dead"],
            "dead_max_by_third": [
                max((r["dead"] for r in rows[i * third : (i + 1) * third]), default=0)
                for i in range(3)
            ],
            "live_final": rows[-1]["live"],
            "total_bytes_start": rows[0]["total_bytes"],
            "total_bytes_end": rows[-1]["total_bytes"],
            "total_bytes_max": max(r["total_bytes"] for r in rows),
            "heap_bytes_end": rows[-1]["heap_bytes"],
            "index_bytes_end": rows[-1]["index_bytes"],
            "autovacuums": rows[-1]["autovacuums"] - rows[0]["autovacuums"],
            "autoanalyzes": rows[-1]["autoanalyzes"] - rows[0]["autoanalyzes"],
        }
    summary["tables"] = tables
    return summary


def run(args: argparse.Namespace) -> dict[str, Any]:
    """One run as ``args`` say; the report (also written to ``args.out`` or bench/results/)."""
    started = datetime.now(UTC)
    opened = _sqlite() if args.backend == "sqlite" else _postgresql(args.autovacuum)
    with opened as (url, _cluster):
        options = table_options(url) if args.backend == "postgresql" else {}
        churn = asyncio.run(_churn(url, args))
    report = {
        "scenario": "churn_soak",
        "backend": args.backend,
        "autovacuum": args.autovacuum if args.backend == "postgresql" else None,
        "started_at": started.isoformat(timespec="seconds"),
        "minutes": args.minutes,
        "workers": args.workers,
        "concurrency": args.concurrency,
        "retain_completed": args.retain,
        "prune_interval": args.prune_interval,
        "cpus": os.cpu_count(),
        "table_options": options,
        **churn,
    }
    report["summary"] = summarize(report)
    out = Path(args.out) if args.out else RESULTS / _name(args, started)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(show(report))
    print(f"report: {out}")
    return report


def show(report: dict[str, Any]) -> str:
    """The summary as a few lines of text (``--show REPORT`` prints it for a saved report)."""
    summary = report["summary"]
    lines = [
        f"{report['backend']} {report.get('autovacuum') or ''} {report['minutes']} min:"
        f" {summary['enqueued']} jobs, {summary['enqueued_per_second']:.1f} enqueued/s,"
        f" {summary['completed_per_second']:.1f} completed/s, backlog max"
        f" {summary['backlog_max']} final {summary['backlog_final']}"
    ]
    if "tables" not in summary:
        for key in ("file_bytes", "page_count", "freelist_count", "wal_bytes"):
            figures = summary[key]
            lines.append(
                f"  {key:15} start {figures['start']:>11} end {figures['end']:>11}"
                f" max {figures['max']:>11} max in last third {figures['max_last_third']:>11}"
            )
        return "\n".join(lines)
    for name, t in summary["tables"].items():
        if not (t["dead_max"] or t["autovacuums"] or t["total_bytes_end"] > 65536):
            continue  # the tables this run leaves alone
        thirds = "/".join(str(d) for d in t["dead_max_by_third"])
        lines.append(
            f"  {name:22} dead max {t['dead_max']:>7} (by third {thirds}) final"
            f" {t['dead_final']:>7} live {t['live_final']:>7}"
            f" MiB {t['total_bytes_start'] / 2**20:.1f} -> {t['total_bytes_end'] / 2**20:.1f}"
            f" (max {t['total_bytes_max'] / 2**20:.1f}) autovacuums {t['autovacuums']}"
        )
    return "\n".join(lines)


def _name(args: argparse.Namespace, started: datetime) -> str:
    mode = f"-{args.autovacuum}" if args.backend == "postgresql" else ""
    return f"churn-soak-{started:%Y-%m-%d-%H%M}-{args.backend}{mode}.json"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.churn_soak", description=__doc__)
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--backend", choices=("postgresql", "sqlite"), default="postgresql")
    p.add_argument("--autovacuum", choices=("default", "table"), default="table")
    p.add_argument("--rate", type=float, default=0.0, help="jobs/s (0: half the drain rate)")
    p.add_argument("--calibrate-jobs", type=int, default=20_000)
    p.add_argument("--sample-seconds", type=float, default=30.0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--retain", default="5m", help="the workers' --completed age")
    p.add_argument("--prune-interval", default="1m")
    p.add_argument("--out", default="", help="the report's path (default: bench/results/)")
    p.add_argument("--show", default="", metavar="REPORT", help="print a saved report's summary")
    return p


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> None:
    # Stopped by a signal (a run started in the background ignores SIGINT), the run still stops
    # its workers and removes its cluster.
    signal.signal(signal.SIGINT, _interrupted)
    signal.signal(signal.SIGTERM, _interrupted)
    args = parser().parse_args(argv)
    if args.show:
        print(show(json.loads(Path(args.show).read_text(encoding="utf-8"))))
        return
    run(args)


if __name__ == "__main__":
    main()
