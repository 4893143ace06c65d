"""The sustained churn scenario (bench/churn_soak.py) at a tiny size and rate, so that it keeps
working: on a throwaway PostgreSQL cluster with autovacuum on, the report holds its samples, the
per-table autovacuum settings the migrations set (or, for ``default``, none), and a summary per
table; on SQLite, the file's figures. No figure is judged: speed lives in docs/performance.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench import churn_soak

from tests.faults.pgserver import cluster_unavailable
from tests.support.databases import IN_CI

pytestmark = [pytest.mark.slow]

TUNED = [
    "autovacuum_vacuum_scale_factor=0.01",
    "autovacuum_analyze_scale_factor=0.02",
    "autovacuum_vacuum_cost_delay=0",
]


def _run(tmp_path: Path, *flags: str) -> dict[str, object]:
    out = tmp_path / "report.json"
    small = ["--minutes", "0.3", "--sample-seconds", "5", "--rate", "50", "--workers", "1"]
    churn_soak.run(
        churn_soak.parser().parse_args([*small, "--concurrency", "4", "--out", str(out), *flags])
    )
    report: dict[str, object] = json.loads(out.read_text(encoding="utf-8"))
    samples = report["samples"]
    assert isinstance(samples, list)
    assert len(samples) >= 4
    assert samples[-1]["seconds"] >= 18
    assert samples[-1]["enqueued"] > 0
    assert {"backlog", "enqueued_per_second", "completed_per_second"} <= set(samples[0])
    return report


@pytest.mark.parametrize("autovacuum", ["table", "default"])
def test_postgresql_samples_every_table_under_the_chosen_settings(
    tmp_path: Path, autovacuum: str
) -> None:
    reason = cluster_unavailable()
    if reason is not None:
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    report = _run(tmp_path, "--backend", "postgresql", "--autovacuum", autovacuum)
    options = report["table_options"]
    assert isinstance(options, dict)
    expected = TUNED if autovacuum == "table" else []
    for table in ("caravel_jobs", "caravel_attempts", "caravel_queue_starts", "caravel_batches"):
        assert options[table] == expected, table
    samples = report["samples"]
    assert isinstance(samples, list)
    jobs = samples[-1]["tables"]["caravel_jobs"]
    assert {"live", "dead", "autovacuums", "total_bytes", "heap_bytes", "index_bytes"} <= set(jobs)
    summary = report["summary"]
    assert isinstance(summary, dict)
    assert {"dead_max", "dead_final", "total_bytes_end", "autovacuums"} <= set(
        summary["tables"]["caravel_jobs"]
    )


def test_sqlite_samples_the_file(tmp_path: Path) -> None:
    report = _run(tmp_path, "--backend", "sqlite")
    samples = report["samples"]
    assert isinstance(samples, list)
    assert {"file_bytes", "page_count", "freelist_count", "wal_bytes"} <= set(samples[-1])
    assert samples[-1]["page_count"] > 0
    summary = report["summary"]
    assert isinstance(summary, dict)
    assert summary["file_bytes"]["end"] > 0
