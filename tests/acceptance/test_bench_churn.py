"""``python -m bench --only churn`` at a tiny size, on PostgreSQL and SQLite: the report has the
rates of every stage and a row for every read an operator makes (each dashboard page, each read
method of the inspector, each read-only CLI command), and each read answered. No speed is
asserted: the figures are docs/performance.md's."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest
from bench import churn

from caravel import QueueInspector
from caravel.web.app import ROUTES

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

SIZES = ["--churn-sizes", "1500", "--churn-read-rows", "1000", "--churn-tombstones", "500"]


@pytest.mark.usefixtures("pg_url")  # the server must be reachable (under CI=true: fails)
def test_the_churn_scenario_measures_every_rate_and_times_every_read(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "bench", "--only", "churn", "--runs", "1"]
    command += ["--backends", "postgresql", "sqlite", "--jobs", "200", "--single", "20"]
    command += ["--concurrency", "20", *SIZES, "--results", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    (written,) = tmp_path.glob("*.json")
    report = json.loads(written.read_text(encoding="utf-8"))

    pages = {r.name for r in ROUTES if r.method == "GET"} - set(churn.UNTIMED_ROUTES)
    methods = {
        name
        for name, member in inspect.getmembers(QueueInspector, inspect.iscoroutinefunction)
        if not name.startswith("_") and name != "close"
    }
    for backend in ("postgresql", "sqlite"):
        figures = report["results"][backend]["churn"]
        stages = figures["stages"]
        assert set(stages) == {"finished_0", "finished_1500", "tombstones_500"}
        for stage in stages.values():
            for rate in churn.RATES:
                assert stage[f"{rate}_jobs_per_second"] > 0
                assert stage[f"{rate}_jobs_per_second_empty"] > 0
                assert f"{rate}_change" in stage
        reads = figures["reads"]
        timed_pages = {name.removeprefix("page ") for name in reads if name.startswith("page ")}
        assert pages <= timed_pages
        timed_methods = {
            name.removeprefix("inspector ").partition("(")[0]
            for name in reads
            if name.startswith("inspector ")
        }
        assert timed_methods == methods
        clis = {name.removeprefix("cli ") for name in reads if name.startswith("cli ")}
        assert clis == set(churn.cli_reads(churn.Fixtures(*[churn.UUID(int=0)] * 5)))
        for name, row in reads.items():
            for side in ("empty", "full"):
                assert row[f"{side}_ms"] > 0, name
                # A page answers 200; a CLI command exits 0; an inspector read answers None.
                assert row[f"{side}_answer"] in (200, 0, None), (name, row)
            assert row["ratio"] == row["full_ms"] / row["empty_ms"]
        assert figures["over_2x"] == sorted(n for n, r in reads.items() if r["ratio"] > 2)
        for name, row in reads.items():
            answers = (row["empty_answer"], row["full_answer"])
            if name.startswith("page "):
                assert answers == (200, 200), (name, row)
            elif name.startswith("cli "):
                assert answers == (0, 0), (name, row)
