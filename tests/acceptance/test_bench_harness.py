"""The benchmark's harness (bench/harness.py, bench/compare.py) on Caravel's own adapter: the
figures docs/performance.md reports come from it, so its readings are checked here: every job
of a drain is finished when it reports, CPU time lands where it was spent, and the start-up
and wake-up readings come from a real worker process. The flow-control scenario
(bench/limits_cost.py) runs at a tiny size on both databases, so that it keeps working. The
Node.js peer (graphile-worker) is driven through the same harness, its CPU counted as the
client's. Two sittings of a tiny comparison run end to end, the second at the first one's
sweep's settings. MariaDB's rows run end to end at a tiny size, and a MariaDB server that does
not answer is left out only where that is allowed (never under ``CI=true``). The autoscaling
scrape's reading (bench/scrape_cost.py) reads the CPU of the served endpoint and of its database
sessions, and the replication scenario (bench/replication_cost.py) runs at a tiny size on a
private primary and standby. The broker bridges' scenario (bench/bridge_cost.py) runs at a tiny
size against the shared RabbitMQ."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import bench.__main__ as cli
import psycopg
import pytest
from bench import (
    bridge_cost,
    compare,
    harness,
    limits_cost,
    notify_cost,
    replication_cost,
    runs,
    scrape_cost,
)
from bench.databases import database, postgres_dsn

from tests.faults.pgserver import cluster_unavailable
from tests.support.databases import IN_CI

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

#: Other work on a loaded test machine must not make the harness take its readings again.
UNLIMITED = 1_000.0


@pytest.fixture(autouse=True)
def _tolerate_load(monkeypatch: pytest.MonkeyPatch, pg_url: str) -> None:
    # pg_url: the PostgreSQL server must be reachable (under CI=true its absence fails).
    monkeypatch.setattr(compare, "MAX_OTHER_CORES", UNLIMITED)


def test_the_notify_scenario_counts_the_notifications_of_each_setting() -> None:
    """Tiny: every one-call enqueue (and the warm-up one) carries a NOTIFY without a window,
    none carries one with wake-ups off, and the default window sends at most as many."""
    figures = notify_cost.notify_cost(40, 8, 1)
    assert figures["wakeups_off_notifications"] == 0
    assert figures["window_0ms_notifications"] == 41
    assert 1 <= figures["window_5ms_default_notifications"] <= 41
    assert figures["window_5ms_default_jobs_per_second"] > 0


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_bridge_scenario_measures_both_directions_beside_the_raw_client(backend: str) -> None:
    from tests.support.rabbitmq import rabbitmq_available

    rabbitmq_available()
    with database(backend) as url:
        figures = asyncio.run(bridge_cost.measure(url, 60, batch=25, prefetch=40))
    for rate in ("raw_publish", "egress", "raw_consume", "ingress"):
        assert figures[f"{rate}_per_second"] > 0
    assert figures["egress_share"] > 0
    assert figures["ingress_share"] > 0


@pytest.mark.parametrize("durable", [True, False])
def test_a_drain_by_two_processes_reports_every_job_finished(durable: bool) -> None:
    settings = {"processes": 2, "concurrency": 50, "loop": "asyncio"}
    figures = compare.drain("caravel", 2000, settings, durable=durable)
    assert figures["jobs"] == 2000
    assert figures["jobs_per_second"] > 0
    # Handled before acknowledged: the acknowledged rate can only be the lower.
    assert figures["handled_jobs_per_second"] >= figures["jobs_per_second"]
    # CPU time is read in clock ticks (10 ms): 2,000 jobs take many of them.
    assert figures["client_cpu_seconds"] + figures["server_cpu_seconds"] > 0


def test_a_drain_reports_its_completed_rows_counted_not_estimated() -> None:
    """Past 10,000 finished jobs ``queue_counts`` gives PostgreSQL's planner estimate, as of the
    last ANALYZE: statistics taken before the second drain left it short (or over) of the rows
    that drain completed. The drain's figure is the rows themselves."""
    with database("postgresql") as url:
        first = asyncio.run(runs.drain(url, 10_500, 200))
        assert first["completed"] == 10_500
        with psycopg.connect(postgres_dsn(url), autocommit=True) as conn:
            # Statistics as an autovacuum ANALYZE between the two would leave them, kept so.
            conn.execute("ANALYZE caravel_jobs")
            conn.execute("ALTER TABLE caravel_jobs SET (autovacuum_enabled = false)")
        second = asyncio.run(runs.drain(url, 1_500, 200))
        assert second["completed"] == 12_000


def test_the_meter_counts_a_child_process_cpu_as_the_clients() -> None:
    burn = "import sys,time\nwhile time.process_time() < 0.3: pass\nprint('burnt', flush=True)\n"
    burner = subprocess.Popen(
        [sys.executable, "-c", burn + "sys.stdin.read()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    meter = harness.Meter("postgres", [burner])
    meter.start()
    assert burner.stdout is not None
    assert burner.stdout.readline().strip() == "burnt"
    reading = meter.stop()
    burner.communicate("", timeout=30)
    assert reading["client_cpu_seconds"] >= 0.25
    assert reading["wall_seconds"] > 0


def test_start_up_and_wake_up_are_read_from_a_real_worker_process() -> None:
    started = time.perf_counter()
    up = compare.startup("caravel", runs=1)
    assert 0 < up["median_seconds"] < time.perf_counter() - started
    woken = compare.latency("caravel", jobs=20, gap=0.01, warm_up=2)
    assert woken["jobs"] == 20
    assert 0 < woken["p50_ms"] <= woken["p99_ms"] <= woken["p999_ms"] <= woken["max_ms"]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_flow_control_scenario_drains_every_setting_and_plans_every_limited_claim(
    backend: str,
) -> None:
    args = argparse.Namespace(runs=1, jobs=200, concurrency=20, limits_plan_backlog=300)
    figures = cli._limits(backend, args)
    for setting in limits_cost.SETTINGS:
        assert figures[f"completed_{setting}"] == 200, setting
        if setting != "plain":
            assert figures[f"ratio_{setting}"] > 0
    passes = ["without_statistics", "analysed"] if backend == "postgresql" else ["as_is"]
    for taken in passes:
        plans = figures["plans"][taken]
        for limit in limits_cost.PLANNED:
            assert plans[limit]["claimed"] > 0, (taken, limit)
            statements = plans[limit]["statements"]
            # The read of the limits row and the claim at least, each with its plan.
            assert len(statements) >= 2, (taken, limit)
            assert all(found["plan"] for found in statements), (taken, limit)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_scrape_reads_the_cpu_of_the_endpoint_and_of_its_database_sessions(
    backend: str,
) -> None:
    """Tiny: the served endpoint answers every scrape, and its CPU and (on PostgreSQL) its
    sessions' are read; the share of a core is derived from them."""
    with database(backend) as url:
        figures = scrape_cost.scrape(url, 500, calls=5, scrapes=30)
    assert figures["reported_ready"] == 2000
    assert figures["reported_finished_last_minute"] == 1000
    assert figures["served_scrapes"] == 30
    for name in ("every_queue", "one_queue"):
        endpoint = figures[f"served_endpoint_cpu_ms_{name}"]
        sessions = figures[f"served_backend_cpu_ms_{name}"]
        # CPU time is read in clock ticks (10 ms): 30 scrapes of a Python endpoint take some.
        assert endpoint > 0, name
        if backend == "sqlite":
            assert sessions == 0, name  # no server: the endpoint's process is everything
        assert figures[f"served_server_cpu_ms_{name}"] == pytest.approx(endpoint + sessions)
        assert figures[f"server_core_percent_at_1000_per_minute_{name}"] == pytest.approx(
            (endpoint + sessions) * 1000 / 60_000 * 100
        )
    if backend == "postgresql":
        assert figures["backend_cpu_ms_every_queue"] >= 0
        assert "backend_cpu_ms_one_queue_live_only" in figures


@pytest.mark.serial
def test_the_replication_scenario_measures_each_mode_on_a_private_pair() -> None:
    """Tiny, two of the modes: every drain finishes its jobs (the scenario checks), each mode
    has every figure, and what the synchronous one adds is derived from them."""
    reason = cluster_unavailable()
    if reason is not None:
        if IN_CI:
            pytest.fail(f"cannot make a private primary and standby: {reason}", pytrace=False)
        pytest.skip(f"cannot make a private primary and standby: {reason}")
    args = argparse.Namespace(
        runs=1, jobs=100, single=10, producers=4, concurrency=10, replication_commits=10
    )
    figures = replication_cost.replication_cost(args, modes=["sync"])
    measured = ("bare_commit_ms", "enqueue_one_jobs_per_second", "bulk_jobs_per_second")
    measured += ("enqueue_parallel_jobs_per_second", "drain_async_acks_jobs_per_second")
    measured += ("drain_durable_acks_jobs_per_second",)
    for mode in ("no_standby", "sync"):
        for key in measured:
            assert figures[f"{key}_{mode}"] > 0, (key, mode)
    assert "bare_commit_ms_async" not in figures
    assert figures["added_commit_ms_sync"] == pytest.approx(
        figures["bare_commit_ms_sync"] - figures["bare_commit_ms_no_standby"]
    )
    assert figures["settings"]["fsync"] == "on"


def test_sittings_reuse_the_first_sweep_and_end_with_the_page(tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "bench",
        "--only",
        "compare",
        "--backends",
        "postgresql",
        "--libraries",
        "caravel",
        "--compare",
        "sweep",
        "drain",
        "--compare-sizes",
        "300",
        "--runs",
        "1",
        "--sittings",
        "2",
        "--results",
        str(tmp_path),
    ]
    grid = [{"processes": 1, "concurrency": c, "loop": "asyncio"} for c in (20, 50)]
    script = (
        "import runpy, sys; from bench import compare\n"
        f"compare.GRIDS['caravel'] = {grid!r}\n"
        f"sys.argv = {command[2:]!r}\n"
        "runpy.run_module('bench', run_name='__main__')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "CARAVEL_BENCH_MAX_OTHER_CORES": str(UNLIMITED)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    first, second = sorted(tmp_path.glob("*.json"))
    assert first.name.endswith("-sitting-1.json")
    assert second.name.endswith("-sitting-2.json")
    reports = [json.loads(path.read_text(encoding="utf-8")) for path in (first, second)]
    swept = reports[0]["compare"]["sweep"]["caravel"]
    assert len(swept["tried"]) == 2
    # One process throughout, so only the concurrency can sit on an edge, and of two values,
    # whichever won does.
    assert [found["knob"] for found in swept["edge"]] == ["concurrency"]
    assert "warning: caravel's best setting" in done.stdout
    assert "sweep" not in reports[1]["compare"]
    assert reports[1]["compare"]["settings"] == {"caravel": swept["best"]}
    for report in reports:
        assert report["sitting"]["commit"]
        assert report["sitting"]["started"]
        assert len(report["sitting"]["loadavg_start"]) == 3
        assert report["compare"]["versions"]["caravel"]
        assert report["compare"]["drain_300_durable"]["caravel"]["jobs"] == 300
    # The page over both sittings closes the output.
    assert "**Drain, 300 jobs waiting, durable acknowledgements**" in done.stdout
    assert "min\u2013max across sittings" in done.stdout
    assert f"| 2 | {second.name} |" in done.stdout


def _bench(tmp_path: Path, grid: list[dict[str, object]], *arguments: str) -> str:
    """``python -m bench`` with Caravel's grid replaced by ``grid``; its output."""
    script = (
        "import runpy, sys; from bench import compare\n"
        f"compare.GRIDS['caravel'] = {grid!r}\n"
        f"sys.argv = {['bench', *arguments, '--results', str(tmp_path)]!r}\n"
        "runpy.run_module('bench', run_name='__main__')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "CARAVEL_BENCH_MAX_OTHER_CORES": str(UNLIMITED)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_a_resweep_sweeps_only_the_libraries_named_and_confirms_its_leaders(
    tmp_path: Path,
) -> None:
    grid = [{"processes": 1, "concurrency": c, "loop": "asyncio"} for c in (10, 20, 30, 40, 50)]
    earlier = {"processes": 1, "concurrency": 7, "loop": "asyncio"}
    record = {"best": earlier, "tried": [{"settings": earlier, "jobs_per_second": 1.0}]}
    report = tmp_path / "earlier.json"
    report.write_text(
        json.dumps({"compare": {"settings": {"caravel": earlier}, "sweep": {"caravel": record}}})
    )
    common = ["--only", "compare", "--backends", "postgresql", "--libraries", "caravel"]
    common += ["--compare", "sweep", "drain", "--compare-sizes", "200", "--runs", "1"]

    kept = tmp_path / "kept"
    _bench(kept, grid, *common, "--settings-from", str(report))
    (reused,) = [json.loads(path.read_text()) for path in kept.glob("*.json")]
    assert reused["compare"]["settings"] == {"caravel": earlier}
    assert "sweep" not in reused["compare"]  # nothing to sweep again: the earlier one stands

    swept_dir = tmp_path / "swept"
    _bench(swept_dir, grid, *common, "--settings-from", str(report), "--resweep", "caravel")
    (swept,) = [json.loads(path.read_text()) for path in swept_dir.glob("*.json")]
    tried = swept["compare"]["sweep"]["caravel"]["tried"]
    assert [t["settings"] for t in tried] == grid
    leaders = [t for t in tried if "confirmed" in t]
    # The four fastest of the single drains, each drained twice more, rated by their median.
    assert len(leaders) == compare.CONFIRM_TOP
    assert all(len(t["confirmed"]) == 1 + compare.CONFIRM_RUNS for t in leaders)
    assert swept["compare"]["settings"]["caravel"] in [t["settings"] for t in leaders]
    best = max(leaders, key=lambda t: t["jobs_per_second"])
    assert swept["compare"]["settings"]["caravel"] == best["settings"]


@pytest.fixture
def _node() -> None:
    """graphile-worker's adapter runs under Node.js: without it, fail in CI and skip elsewhere."""
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        message = f"graphile-worker's adapter needs Node.js: {' and '.join(missing)} not found"
        if IN_CI:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


@pytest.mark.usefixtures("_node")
def test_the_node_peer_drains_every_job_and_its_cpu_is_the_clients() -> None:
    settings = {"processes": 2, "concurrency": 50, "local_queue": 200, "complete_batch_delay": 0}
    figures = compare.drain("graphile", 2000, settings, durable=True)
    assert figures["jobs"] == 2000
    assert figures["jobs_per_second"] > 0
    assert figures["handled_jobs_per_second"] >= figures["jobs_per_second"]
    # The adapter is the node process itself: its CPU time is read, not lost behind a launcher.
    assert figures["client_cpu_seconds"] > 0


@pytest.mark.usefixtures("_node")
@pytest.mark.parametrize("bulk", [False, True])
def test_the_node_peer_enqueues_one_by_one_and_in_bulk(bulk: bool) -> None:
    figures = compare.enqueue("graphile", 3000 if bulk else 300, bulk=bulk)
    assert figures["jobs"] == (3000 if bulk else 300)
    assert figures["jobs_per_second"] > 0
    if not bulk:
        # 300 calls take many 10 ms clock ticks of the producer's CPU.
        assert figures["process_cpu_seconds"] > 0
        assert figures["client_cpu_ms_per_job"] > 0


@pytest.mark.mariadb
@pytest.mark.usefixtures("mariadb_url")  # the server must be reachable (under CI=true: fails)
def test_mariadbs_rows_run_end_to_end_at_a_tiny_size(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "bench", "--backends", "mariadb", "--runs", "1"]
    command += ["--only", "enqueue", "bulk", "drain", "latency", "commit", "counts"]
    command += ["--jobs", "300", "--single", "20", "--concurrency", "20"]
    command += ["--poll-jobs", "5", "--idle-jobs", "1", "--results", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "counts   not measured on MariaDB" in done.stdout
    (written,) = tmp_path.glob("*.json")
    report = json.loads(written.read_text(encoding="utf-8"))
    assert report["mariadb"]["innodb_flush_log_at_trx_commit"] in (0, 1, 2)
    rows = report["results"]["mariadb"]
    assert set(rows) == {"enqueue", "bulk", "drain", "latency", "commit"}
    assert rows["enqueue"]["jobs"] == 20
    assert rows["bulk"]["jobs_per_second"] > 0
    assert rows["bulk"]["floor_jobs_per_second"] > 0
    # One drain only: every MariaDB commit is as durable as the server makes it.
    assert rows["drain"]["completed_durable_acks"] == 300
    assert "completed_async_acks" not in rows["drain"]
    for setting in cli.POLLING:
        woken = rows["latency"]
        assert 0 < woken[f"{setting}_after_commit_p50_ms"] <= woken[f"{setting}_p50_ms"]
    assert rows["commit"]["commits"] == 20
    assert rows["commit"]["commits_per_second"] > 0
    assert (
        0
        < rows["commit"]["enqueue_share_of_ceiling"]
        == pytest.approx(
            rows["commit"]["enqueue_per_second"] / rows["commit"]["commits_per_second"]
        )
    )


@pytest.mark.parametrize(
    ("arguments", "ci", "refused"),
    [
        (["--if-reachable"], "", False),
        ([], "", True),
        (["--if-reachable"], "true", True),
    ],
)
def test_an_unreachable_mariadb_is_left_out_only_where_allowed(
    tmp_path: Path, arguments: list[str], ci: str, refused: bool
) -> None:
    command = [sys.executable, "-m", "bench", "--backends", "mariadb", "--only", "commit"]
    command += [*arguments, "--results", str(tmp_path)]
    # Port 1: nothing listens there, so the connection is refused at once.
    env = {**os.environ, "CARAVEL_BENCH_MARIADB_URL": "mariadb://root@127.0.0.1:1/test", "CI": ci}
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    if refused:
        assert done.returncode == 2, done.stdout
        assert "MariaDB is not reachable at mariadb://root@127.0.0.1:1/test" in done.stderr
        assert "set CARAVEL_BENCH_MARIADB_URL" in done.stderr
    else:
        assert done.returncode == 0, done.stderr[-2000:]
        assert "MariaDB's rows are left out: MariaDB is not reachable" in done.stdout
    assert not list(tmp_path.glob("*.json"))
