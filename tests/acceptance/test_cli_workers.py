"""``caravel workers``: the worker registry as the command line shows it, with real worker
processes: running while alive, stopped after a normal shutdown, lost after SIGKILL."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.support.processes import WorkerProcess, run_cli, wait_until

pytestmark = pytest.mark.slow


def _workers(url: str, *extra: str) -> list[dict[str, object]]:
    result = run_cli("workers", "--url", url, "--json", *extra)
    assert result.returncode == 0, result.stderr
    rows: list[dict[str, object]] = json.loads(result.stdout)["workers"]
    return rows


def test_workers_show_running_stopped_and_lost(db_url: str, tmp_path: Path) -> None:
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    args = ("--heartbeat-interval", "1", "--poll-interval", "0.05", "--concurrency", "3")
    graceful = WorkerProcess(db_url, evidence, ["naps", "emails"], *args)
    killed = WorkerProcess(db_url, evidence, ["naps"], *args)
    try:
        wait_until(lambda: len(_workers(db_url)) == 2, what="both workers to register")
        by_pid = {row["pid"]: row for row in _workers(db_url)}
        first = by_pid[graceful.process.pid]
        assert first["state"] == "running"
        assert first["queues"] == ["naps", "emails"]
        assert first["concurrency"] == 3
        assert by_pid[killed.process.pid]["state"] == "running"

        graceful.signal(signal.SIGTERM)
        assert graceful.wait()[0] == 0
        killed.process.send_signal(signal.SIGKILL)
        killed.process.wait()

        def settled() -> bool:
            states = {r["pid"]: r["state"] for r in _workers(db_url, "--lost-after", "2")}
            return states.get(graceful.process.pid) == "stopped" and (
                states.get(killed.process.pid) == "lost"
            )

        wait_until(settled, timeout=30, what="one stopped and one lost worker")
    finally:
        graceful.kill()
        killed.kill()
    table = run_cli("workers", "--url", db_url, "--lost-after", "2")
    assert table.returncode == 0
    assert "lost" in table.stdout
    assert "stopped" in table.stdout
    assert "last heartbeat (UTC)" in table.stdout
