"""The benchmark's page (bench/page.py) and its grids (bench/grids.py): the tables
docs/performance.md publishes are rendered from the reports of several sittings, so what each
cell shows is checked here on reports made up for it: the median of the sittings' figures, their
lowest and highest as the spread, Caravel's ratio to each peer, the CPU per job, the sittings'
load and commits, the versions, and the settings the sweep chose with any on its grid's edge.
Whatever libraries a report names get rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from bench import grids, page

DASH = "\u2013"


def _drain(rate: float, client_ms: float, *, disturbed: int = 0) -> dict[str, Any]:
    return {
        "runs": 3,
        "jobs": 20_000,
        "jobs_per_second": rate,
        "jobs_per_second_min": rate * 0.9,
        "jobs_per_second_max": rate * 1.1,
        "client_cpu_ms_per_job": client_ms,
        "server_cpu_ms_per_job": client_ms / 2,
        "other_cores": 0.05,
        "loadavg_1m": 1.0,
        "disturbed_runs": disturbed,
    }


def _sitting(number: int, caravel: float, pgqueuer: float, graphile: float | None) -> dict:
    drain = {"caravel": _drain(caravel, 0.02), "pgqueuer": _drain(pgqueuer, 0.05, disturbed=1)}
    if graphile is not None:
        drain["graphile"] = _drain(graphile, 0.3)
    drain["caravel"]["loadavg_1m"] = 0.5 + number
    compare: dict[str, Any] = {
        "versions": {"caravel": "0.1.0", "pgqueuer": "1.6.0", "graphile": "0.16.6"},
        "settings": {
            "caravel": {"processes": 2, "concurrency": 1000, "loop": "uvloop"},
            "pgqueuer": {"processes": 3, "batch": 5000},
            "graphile": {"processes": 1, "concurrency": 10},
        },
        "drain_20000_durable": drain,
        "enqueue": {
            "caravel": {"runs": 3, "jobs": 2000, "jobs_per_second": 2500.0 + number,
                        "client_cpu_ms_per_job": 0.15, "server_cpu_ms_per_job": 0.125},
            "pgqueuer": {"runs": 3, "jobs": 2000, "jobs_per_second": 2000.0,
                         "client_cpu_ms_per_job": 0.14, "server_cpu_ms_per_job": 0.195},
        },
        "latency": {
            "caravel": {"runs": 3, "p50_ms": 1 + number / 10, "p95_ms": 2.0, "p99_ms": 3 * number},
        },
    }  # fmt: skip
    if number == 1:
        compare["sweep"] = {
            "pgqueuer": {
                "best": {"processes": 3, "batch": 5000},
                "tried": [
                    {"settings": {"processes": n, "batch": b}, "jobs_per_second": n * b / 10}
                    for n in (1, 3, 4)
                    for b in (100, 5000)
                ][:-1],  # processes=4, batch=5,000 did not win: only the batch is on the edge
                "edge": [{"knob": "batch", "value": 5000, "side": "highest"}],
                "jobs": 20000,
            }
        }
    return {
        "sitting": {
            "started": f"2026-12-0{number}T10:00:00Z",
            "commit": "abc1234",
            "dirty": number == 3,
            "loadavg_start": [0.25 * number, 0.2, 0.1],
        },
        "machine": {"python": "3.11.7"},
        "postgresql": {"server_version": "15.20"},
        "compare": compare,
    }


SITTINGS = [
    _sitting(1, caravel=40_000, pgqueuer=10_000, graphile=None),
    _sitting(2, caravel=50_000, pgqueuer=12_000, graphile=3_000),
    _sitting(3, caravel=45_000, pgqueuer=11_000, graphile=5_000),
]


def _rows(text: str, title: str) -> dict[str, list[str]]:
    """The rows of the table after the line starting with ``title``, by their first cell."""
    lines = text.split(title, 1)[1].split("\n\n", 2)[1]
    rows = [line.strip("|").split(" | ") for line in lines.splitlines()]
    return {cells[0].strip(): [cell.strip() for cell in cells] for cells in rows[2:]}


def test_a_drain_cell_is_the_sittings_median_and_the_spread_their_lowest_and_highest() -> None:
    text = page.render(SITTINGS)
    rows = _rows(text, "**Drain, 20,000 jobs waiting, durable acknowledgements**")
    assert list(rows) == ["caravel", "pgqueuer", "graphile"]
    # library, jobs, jobs/s, spread, ratio, workers' and server's CPU (µs/job), runs (disturbed)
    assert rows["caravel"] == [
        "caravel",
        "20,000",
        "45,000",
        f"40,000{DASH}50,000",
        "—",
        "20",
        "10",
        "9 (0)",
    ]
    assert rows["pgqueuer"][2:5] == ["11,000", f"10,000{DASH}12,000", "4.09\u00d7"]
    assert rows["pgqueuer"][5:] == ["50", "25", "9 (3)"]
    # A library measured in two of the sittings: the median of those two.
    assert rows["graphile"][2:5] == ["4,000", f"3,000{DASH}5,000", "11.25\u00d7"]
    assert "min\u2013max across sittings" in text


def test_enqueue_and_wake_up_show_the_median_sitting() -> None:
    text = page.render(SITTINGS)
    enqueue = _rows(text, "**One-call enqueue**")
    assert enqueue["caravel"][2:8] == ["2,502", f"2,501{DASH}2,503", "—", "0.15", "0.125", "9 (0)"]
    assert enqueue["pgqueuer"][4] == "1.25\u00d7"
    latency = _rows(text, "**Idle wake-up**")
    assert latency["caravel"][1:5] == ["1.2", "2", "6", f"3{DASH}9"]
    assert "**Bulk enqueue**" not in text  # no sitting measured it


def test_the_sittings_versions_and_settings_are_shown() -> None:
    text = page.render(SITTINGS)
    sittings = _rows(text, "**Sittings**")
    # number, report, started, commit, load at start, load during readings, other cores, disturbed
    assert sittings["1"][2:] == [
        "2026-12-01T10:00:00Z",
        "abc1234",
        "0.25",
        f"1{DASH}1.5",
        "0.05 (0.05)",
        "1",
    ]
    assert sittings["3"][3] == "abc1234 (with changes)"
    assert sittings["3"][5] == f"1{DASH}3.5"
    assert sittings["2"][7] == "1"  # pgqueuer's disturbed run of that sitting
    versions = _rows(text, "**Versions**")
    assert versions["PostgreSQL"][1] == "15.20"
    assert versions["pgqueuer"][1] == "1.6.0"
    assert versions["graphile"][1] == "0.16.6"
    settings = _rows(text, "**Settings each library ran at**")
    assert settings["pgqueuer"][1:] == [
        "processes=3, batch=5,000",
        "processes 1, 3, 4; batch 100, 5,000",
        "batch=5,000 (highest tried)",
        "20,000",
        "1,500",
    ]
    assert settings["caravel"][2].startswith("no sweep")  # fmt: skip


def test_one_sitting_shows_the_spread_of_its_runs(tmp_path: Path) -> None:
    path = tmp_path / "one.json"
    path.write_text(json.dumps(SITTINGS[1]), encoding="utf-8")
    text = page.render([page.load(path)])
    rows = _rows(text, "**Drain, 20,000 jobs waiting, durable acknowledgements**")
    assert rows["caravel"][2:4] == ["50,000", f"45,000{DASH}55,000"]
    assert "min\u2013max across runs" in text
    assert _rows(text, "**Sittings**")["1"][1] == "one.json"


def test_reports_without_a_comparison_are_refused() -> None:
    with pytest.raises(ValueError, match="no report has a comparison"):
        page.render([{"results": {}}])


GRID = [
    {"processes": n, "batch": b, "loop": loop}
    for n in (1, 2, 3)
    for b in (100, 1000, 5000)
    for loop in ("asyncio", "uvloop")
]


@pytest.mark.parametrize(
    ("best", "edge"),
    [
        ({"processes": 2, "batch": 1000, "loop": "uvloop"}, []),
        # One process is as low as processes go: no edge; the largest batch is one.
        (
            {"processes": 1, "batch": 5000, "loop": "asyncio"},
            [{"knob": "batch", "value": 5000, "side": "highest"}],
        ),
        (
            {"processes": 3, "batch": 100, "loop": "uvloop"},
            [
                {"knob": "processes", "value": 3, "side": "highest"},
                {"knob": "batch", "value": 100, "side": "lowest"},
            ],
        ),
    ],
)
def test_a_best_setting_on_the_edge_of_its_grid_is_found(
    best: dict[str, Any], edge: list[dict[str, Any]]
) -> None:
    assert grids.edges(best, GRID) == edge


def test_a_knob_the_grid_does_not_vary_is_no_edge() -> None:
    grid = [{"processes": 1, "limit": 50}, {"processes": 1, "limit": 200}]
    assert grids.edges({"processes": 1, "limit": 50}, grid) == [
        {"knob": "limit", "value": 50, "side": "lowest"}
    ]


def test_the_most_a_library_accepts_is_no_edge() -> None:
    grid = [{"processes": 1, "concurrency": c} for c in (250, 1024)] + [
        {"processes": 2, "concurrency": 1024}
    ]
    best = {"processes": 1, "concurrency": 1024}
    assert grids.edges(best, grid, {"concurrency": 1024}) == []
    assert grids.edges(best, grid) == [{"knob": "concurrency", "value": 1024, "side": "highest"}]


def test_without_a_sweep_the_middle_of_the_grid_is_taken() -> None:
    assert grids.middle(GRID) == {"processes": 2, "batch": 1000, "loop": "uvloop"}
    assert grids.describe({"processes": 2, "batch": 10000}) == "processes=2, batch=10,000"
