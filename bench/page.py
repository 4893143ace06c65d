"""The comparison's tables as docs/performance.md shows them, from the reports of one or more
sittings (each a JSON file ``python -m bench`` wrote with a ``compare`` section):

    python -m bench.page bench/results/20261201-161700-sitting-1.json bench/results/...

Each figure is the median of the sittings' figures (each of those a median of its runs), with
the lowest and the highest of them as its spread; of one sitting, the spread of its runs. Any
library a report names gets its row, Caravel's first; the ratio column is Caravel's figure
divided by the row's. Then the sittings themselves (when, which commit, how busy the machine
was), the versions measured, and the settings each library's sweep chose.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from bench import grids

SUBJECT = "caravel"
DRAIN = re.compile(r"^drain_(\d+)_(durable|async)$")
NONE = "—"
#: The spread's dash and the ratio's sign, as the page prints them.
DASH = "\u2013"
TIMES = "\u00d7"

Report = dict[str, Any]


def load(path: Path) -> Report:
    """One sitting's report, with its file name (``file``) for the table of sittings."""
    report: Report = json.loads(Path(path).read_text(encoding="utf-8"))
    report["file"] = Path(path).name
    return report


# ----- formatting -------------------------------------------------------------------------------


def num(value: float | None) -> str:
    """A figure with the digits that mean something: thousands separated from 100 up, three
    significant digits below."""
    if value is None:
        return NONE
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _range(low: float | None, high: float | None) -> str:
    """Lowest to highest; a dash alone where there is nothing to spread (one run of one sitting)."""
    if low is None or high is None or low == high:
        return NONE
    return f"{num(low)}{DASH}{num(high)}"


def _table(header: list[str], rows: Iterable[list[str]], text: int = 1) -> str:
    """A Markdown table, its first ``text`` columns left-aligned and the figures right."""
    rule = ["---" if n < text else "---:" for n in range(len(header))]
    lines = [header, rule, *rows]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)


# ----- reading the sittings ---------------------------------------------------------------------


def _compares(sittings: list[Report]) -> list[Report]:
    return [s["compare"] for s in sittings if "compare" in s]


def libraries(sittings: list[Report]) -> list[str]:
    """Every library any sitting measured (settings or figures, not only a version), Caravel
    first, the others as they first appear."""
    found: list[str] = []
    for compare in _compares(sittings):
        for section, value in compare.items():
            if section != "versions" and isinstance(value, dict):
                found += [lib for lib, figures in value.items() if isinstance(figures, dict)]
    return sorted(dict.fromkeys(found), key=lambda lib: lib != SUBJECT)


class Figure:
    """One library's figures of one section across the sittings that measured it."""

    def __init__(self, sittings: list[Report], section: str, lib: str) -> None:
        self.records: list[dict[str, Any]] = [
            c[section][lib] for c in _compares(sittings) if lib in c.get(section, {})
        ]

    def __bool__(self) -> bool:
        return bool(self.records)

    def values(self, key: str) -> list[float]:
        return [r[key] for r in self.records if isinstance(r.get(key), int | float)]

    def median(self, key: str, scale: float = 1.0) -> float | None:
        values = self.values(key)
        return statistics.median(values) * scale if values else None

    def spread(self, key: str) -> tuple[float | None, float | None]:
        """Lowest and highest across the sittings; of one sitting, across its runs."""
        values = self.values(key)
        if len(values) > 1:
            return min(values), max(values)
        if len(self.records) == 1:
            record = self.records[0]
            return record.get(f"{key}_min"), record.get(f"{key}_max")
        return None, None

    def total(self, key: str) -> int:
        return int(sum(self.values(key)))


def _spread_label(sittings: list[Report]) -> str:
    count = len(_compares(sittings))
    return f"min{DASH}max across " + ("sittings" if count > 1 else "runs")


def _ratio(sittings: list[Report], section: str, lib: str, key: str) -> str:
    """Caravel's median divided by ``lib``'s."""
    ours = Figure(sittings, section, SUBJECT).median(key)
    theirs = Figure(sittings, section, lib).median(key)
    if lib == SUBJECT or not ours or not theirs:
        return NONE
    return f"{ours / theirs:.2f}{TIMES}"


# ----- the tables -------------------------------------------------------------------------------


def sittings_table(sittings: list[Report]) -> str:
    rows = []
    for number, report in enumerate(sittings, 1):
        compare = report.get("compare", {})
        readings = [
            figures
            for section, value in compare.items()
            if isinstance(value, dict) and section not in ("sweep", "settings", "versions")
            for figures in value.values()
            if isinstance(figures, dict)
        ]
        load = [r["loadavg_1m"] for r in readings if "loadavg_1m" in r]
        others = [r["other_cores"] for r in readings if "other_cores" in r]
        sitting = report.get("sitting", {})
        start = sitting.get("loadavg_start")
        commit = sitting.get("commit") or NONE
        if sitting.get("dirty"):
            commit += " (with changes)"
        rows.append(
            [
                str(number),
                report.get("file", NONE),
                sitting.get("started", NONE),
                commit,
                num(start[0]) if start else NONE,
                _range(min(load), max(load)) if load else NONE,
                f"{num(statistics.median(others))} ({num(max(others))})" if others else NONE,
                str(sum(int(r.get("disturbed_runs", 0)) for r in readings)),
            ]
        )
    header = [
        "sitting",
        "report",
        "started (UTC)",
        "commit",
        "load avg 1 min at start",
        "load avg during readings",
        "other cores, median (max)",
        "disturbed runs",
    ]
    return _table(header, rows, text=4)


def versions_table(sittings: list[Report]) -> str:
    def distinct(values: Iterable[Any]) -> str:
        shown = [str(v) for v in dict.fromkeys(values) if v is not None]
        return ", ".join(shown) if shown else NONE

    rows = [
        ["Python", distinct(s.get("machine", {}).get("python") for s in sittings)],
        [
            "PostgreSQL",
            distinct(s.get("postgresql", {}).get("server_version") for s in sittings),
        ],
        ["Caravel's commit", distinct(s.get("sitting", {}).get("commit") for s in sittings)],
    ]
    for lib in libraries(sittings):
        rows.append([lib, distinct(c.get("versions", {}).get(lib) for c in _compares(sittings))])
    return _table(["", "version"], rows, text=2)


def settings_table(sittings: list[Report]) -> str:
    """Per library: the settings its figures were taken at, and the sweep that chose them
    (the first sitting's; later sittings reuse its choice)."""
    rows = []
    for lib in libraries(sittings):
        chosen = [c["settings"][lib] for c in _compares(sittings) if lib in c.get("settings", {})]
        shown = "; ".join(dict.fromkeys(grids.describe(s) for s in chosen)) or NONE
        swept = next(
            (c["sweep"][lib] for c in _compares(sittings) if lib in c.get("sweep", {})), None
        )
        if swept is None:
            origins = dict.fromkeys(
                c.get("settings_from", {}).get(lib, "not recorded") for c in _compares(sittings)
            )
            rows.append([lib, shown, f"no sweep: {', '.join(origins)}", NONE, NONE, NONE])
            continue
        tried = [t["settings"] for t in swept["tried"]]
        best = swept["best"]
        rate = next((t["jobs_per_second"] for t in swept["tried"] if t["settings"] == best), None)
        edge = swept.get("edge")
        if edge is None:  # a report from before edges were recorded
            edge = grids.edges(best, tried)
        grid = "; ".join(
            f"{knob} " + ", ".join(f"{v:,}" if isinstance(v, int) else str(v) for v in values)
            for knob, values in grids.knobs(tried).items()
        )
        on_edge = "; ".join(
            f"{grids.describe({e['knob']: e['value']})} ({e['side']} tried)" for e in edge
        )
        rows.append([lib, shown, grid, on_edge or "none", num(swept.get("jobs")), num(rate)])
    header = [
        "library",
        "chosen",
        "grid tried",
        "best on the grid's edge",
        "sweep's jobs",
        "jobs/s in the sweep",
    ]
    return _table(header, rows, text=4)


def _rate_table(
    sittings: list[Report],
    section: str,
    cpu: list[tuple[str, str, float]],
    jobs_column: bool = False,
) -> str:
    """Per library: jobs/s (median, spread, Caravel's ratio), then the ``cpu`` columns
    (header, key, scale), then runs and how many were disturbed."""
    header = ["library"]
    if jobs_column:
        header.append("jobs")
    header += ["jobs/s", _spread_label(sittings), "Caravel ÷ it"]
    header += [title for title, _key, _scale in cpu]
    header.append("runs (disturbed)")
    rows = []
    for lib in libraries(sittings):
        figure = Figure(sittings, section, lib)
        if not figure:
            continue
        row = [lib]
        if jobs_column:
            row.append(num(figure.median("jobs")))
        row += [
            num(figure.median("jobs_per_second")),
            _range(*figure.spread("jobs_per_second")),
            _ratio(sittings, section, lib, "jobs_per_second"),
        ]
        row += [num(figure.median(key, scale)) for _title, key, scale in cpu]
        row.append(f"{figure.total('runs')} ({figure.total('disturbed_runs')})")
        rows.append(row)
    return _table(header, rows)


def drain_tables(sittings: list[Report]) -> list[str]:
    sections: set[tuple[int, str]] = set()
    for compare in _compares(sittings):
        for key in compare:
            if match := DRAIN.match(key):
                sections.add((int(match[1]), match[2]))
    tables = []
    for size, mode in sorted(sections, key=lambda s: (s[0], s[1] != "durable")):
        title = f"**Drain, {size:,} jobs waiting, {mode} acknowledgements**"
        cpu = [
            ("CPU µs/job, workers", "client_cpu_ms_per_job", 1000.0),
            ("CPU µs/job, server", "server_cpu_ms_per_job", 1000.0),
        ]
        table = _rate_table(sittings, f"drain_{size}_{mode}", cpu, jobs_column=True)
        tables.append(f"{title}\n\n{table}")
    return tables


def enqueue_table(sittings: list[Report]) -> str:
    cpu = [
        ("CPU ms/job, producer", "client_cpu_ms_per_job", 1.0),
        ("CPU ms/job, server", "server_cpu_ms_per_job", 1.0),
    ]
    return _rate_table(sittings, "enqueue", cpu, jobs_column=True)


def bulk_table(sittings: list[Report]) -> str:
    cpu = [
        ("CPU µs/job, producer", "client_cpu_ms_per_job", 1000.0),
        ("CPU µs/job, server", "server_cpu_ms_per_job", 1000.0),
    ]
    return _rate_table(sittings, "bulk", cpu, jobs_column=True)


def latency_table(sittings: list[Report]) -> str:
    rows = []
    for lib in libraries(sittings):
        figure = Figure(sittings, "latency", lib)
        if figure:
            rows.append(
                [
                    lib,
                    num(figure.median("p50_ms")),
                    num(figure.median("p95_ms")),
                    num(figure.median("p99_ms")),
                    _range(*figure.spread("p99_ms")),
                    f"{figure.total('runs')} ({figure.total('disturbed_runs')})",
                ]
            )
    header = ["library", "p50 (ms)", "p95 (ms)", "p99 (ms)", f"p99 {_spread_label(sittings)}"]
    return _table([*header, "runs (disturbed)"], rows)


def startup_table(sittings: list[Report]) -> str:
    rows = []
    for lib in libraries(sittings):
        figure = Figure(sittings, "startup", lib)
        if figure:
            rows.append(
                [
                    lib,
                    num(figure.median("median_seconds")),
                    _range(*figure.spread("median_seconds")),
                    str(figure.total("runs")),
                ]
            )
    return _table(["library", "seconds", _spread_label(sittings), "runs"], rows)


def render(sittings: list[Report]) -> str:
    """The page's tables, Markdown, for the sittings' reports (in the order they ran)."""
    count = len(_compares(sittings))
    if not count:
        raise ValueError(
            "no report has a comparison (a compare section): run python -m bench --only compare"
        )
    if count > 1:
        summary = (
            f"{count} sittings: each figure is the median of the sittings' figures (each the"
            " median of its runs), its spread their lowest and highest."
        )
    else:
        summary = "one sitting: each figure is the median of its runs, its spread theirs."
    parts = [
        f"Caravel and its peers on PostgreSQL, {summary}",
        f"**Sittings**\n\n{sittings_table(sittings)}",
        f"**Versions**\n\n{versions_table(sittings)}",
        "**Settings each library ran at**, and the sweep that chose them (durable drains, each"
        " setting once and the fastest four twice more; the rate is the chosen one's median)\n\n"
        f"{settings_table(sittings)}",
        *drain_tables(sittings),
    ]
    sections: list[tuple[str, Callable[[list[Report]], str], str]] = [
        ("enqueue", enqueue_table, "**One-call enqueue**, one caller, a key per job"),
        ("bulk", bulk_table, "**Bulk enqueue**, batches of 1,000, a key per job"),
        ("latency", latency_table, "**Idle wake-up**, enqueue call to handler start"),
        ("startup", startup_table, "**Worker start-up**, spawn to first handler, one job waiting"),
    ]
    for section, table, title in sections:
        if any(section in c for c in _compares(sittings)):
            parts.append(f"{title}\n\n{table(sittings)}")
    return "\n\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.page", description=__doc__)
    parser.add_argument("reports", nargs="+", type=Path, help="JSON reports, one per sitting")
    args = parser.parse_args()
    sittings = []
    for path in args.reports:
        try:
            sittings.append(load(path))
        except (OSError, ValueError) as exc:
            parser.error(f"{path}: not a readable JSON report ({exc})")
    try:
        print(render(sittings))
    except ValueError as exc:
        parser.error(str(exc))


if __name__ == "__main__":
    main()
