"""``caravel worker --loop``: the real command runs its jobs and stops on a signal on uvloop as
on asyncio's own loop, and refuses a loop it does not know in one line."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.acceptance.test_worker_process import FAST, QUEUE, completed, enqueue
from tests.support.apps.workload import Nap
from tests.support.processes import WorkerProcess, wait_until

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_the_worker_runs_jobs_and_stops_on_either_loop(
    db_url: str, tmp_path: Path, loop: str
) -> None:
    ids = enqueue(db_url, Nap(0.0), Nap(0.0))
    worker = WorkerProcess(db_url, tmp_path, [QUEUE], *FAST, "--loop", loop)
    try:
        wait_until(lambda: completed(db_url, ids), what="both jobs to be acknowledged")
        worker.signal(signal.SIGTERM)
        code, err = worker.wait()
        assert code == 0, err
        assert "stopped" in err
    finally:
        worker.kill()


def test_an_unknown_loop_is_one_line_and_exit_2(db_url: str) -> None:
    command = ["worker", "--url", db_url, "--app", "x:y", "--queue", QUEUE, "--loop", "trio"]
    done = subprocess.run(
        [sys.executable, "-m", "caravel", *command],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == "caravel worker: --loop must be asyncio or uvloop, not 'trio'"
