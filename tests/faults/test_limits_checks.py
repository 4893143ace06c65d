"""The flow-control checkers themselves, over records written by hand in the handlers' shape
(:mod:`tests.faults.limits_app`): a fault run passing proves the limits held only if the
checkers see a breach when there is one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.faults.limits_app import check_rate_records, check_records


def _write(folder: Path, pid: int, records: list[dict[str, Any]]) -> None:
    lines = "".join(json.dumps(record) + "\n" for record in records)
    (folder / f"{pid}.jsonl").write_text(lines)


def _run(
    job: str, key: str, at: int, expires: int, end: int | None, claimed: int | None = None
) -> list[dict[str, Any]]:
    """A combined handler's records: its start (lease expiry and claim time from its row) and,
    unless its process died first, its end."""
    start = {"e": "start", "job": job, "attempt": 1, "key": key, "at": at, "expires": expires}
    records = [{**start, "claimed": at if claimed is None else claimed}]
    if end is not None:
        records.append({"e": "end", "job": job, "attempt": 1, "at": end})
    return records


def test_runs_count_until_their_end_or_their_lease_expiry_whichever_comes_first(
    tmp_path: Path,
) -> None:
    _write(tmp_path, 1, [*_run("a", "k1", 0, 1500, 400), *_run("b", "k1", 100, 1500, None)])
    # c's process was stopped: it ended long after its lease expired, at 1,200.
    _write(tmp_path, 2, [*_run("c", "k2", 200, 1200, 5000), *_run("d", "k1", 300, 1800, 900)])
    # e starts as c's lease expires: c no longer counts, so k2 never has two at once.
    _write(tmp_path, 3, _run("e", "k2", 1200, 2700, 1300))
    found = check_records(tmp_path)
    assert (found.runs, found.unfinished) == (5, 1)
    assert found.max_running == 4  # a, b, c and d, from 300 to 400
    assert found.per_key == {"k1": 3, "k2": 1}  # a, b and d: a breach of a cap of 2
    assert found.max_per_key == 3
    # The peak names the overlapping runs and the processes that ran them.
    assert [(run["job"], run["pid"], run["end"]) for run in found.peak] == [
        ("a", 1, 400),
        ("b", 1, None),
        ("c", 2, 5000),
        ("d", 2, 900),
    ]


def test_a_run_whose_job_was_taken_over_before_it_began_counts_for_nothing(
    tmp_path: Path,
) -> None:
    # The handler read a later attempt on its row: it recorded its lease as gone when it began.
    _write(tmp_path, 1, [*_run("a", "k1", 0, 1500, 400), *_run("b", "k1", 100, 100, 600)])
    assert check_records(tmp_path).max_running == 1


def test_claims_within_any_period_are_counted_and_end_records_are_skipped(tmp_path: Path) -> None:
    # Twenty claims within 190 ms, then one exactly 1,000 ms after the first: the first is
    # outside its window, which is (t - period, t].
    records: list[dict[str, Any]] = []
    for n in range(20):
        records += _run(f"j{n}", "k1", n, 9999, n + 50, claimed=n * 10)
    records += _run("late", "k1", 1000, 9999, 1100, claimed=1000)
    _write(tmp_path, 1, records)
    found = check_rate_records(tmp_path, 1000)
    assert (found.witnessed, found.max_in_window) == (21, 20)
    _write(tmp_path, 2, _run("breach", "k2", 5, 9999, None, claimed=995))
    assert check_rate_records(tmp_path, 1000).max_in_window == 21  # the twenty and 995
