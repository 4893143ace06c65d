"""The benchmark's harness (bench/harness.py, bench/compare.py) on Caravel's own adapter: the
figures docs/performance.md reports come from it, so its readings are checked here: every job
of a drain is finished when it reports, CPU time lands where it was spent, and the start-up
and wake-up readings come from a real worker process. The flow-control scenario
(bench/limits_cost.py) runs at a tiny size on both databases, so that it keeps working."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import bench.__main__ as cli
import pytest
from bench import compare, harness, limits_cost

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

#: Other work on a loaded test machine must not make the harness take its readings again.
UNLIMITED = 1_000.0


@pytest.fixture(autouse=True)
def _tolerate_load(monkeypatch: pytest.MonkeyPatch, pg_url: str) -> None:
    # pg_url: the PostgreSQL server must be reachable (under CI=true its absence fails).
    monkeypatch.setattr(compare, "MAX_OTHER_CORES", UNLIMITED)


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
