"""The README's first command: what `make demo` runs once its install is done, and the commands
it tells the newcomer to run next, run as printed."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.blocks import ROOT
from tests.support.processes import free_port, served_page

pytestmark = pytest.mark.slow

CARAVEL = str(Path(sys.executable).parent / "caravel")


def test_make_demo_explains_its_steps_keeps_its_folder_and_its_next_commands_work(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "PYTHON": sys.executable, "TMPDIR": str(tmp_path)}
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "demo.sh")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()

    # Each step says what it does; the report is there and explained.
    for step in ("1. Apply", "2. Enqueue", "3. Work", "4. The queue's counts", "5. The report"):
        assert any(line.startswith(step) for line in lines), step
    report = lines.index('{"events": 3, "total": 6}')
    assert "events: the rows the handler saved" in lines[report + 1]

    # The folder is left for the commands that follow, and they name it.
    (folder,) = tmp_path.glob("caravel-demo-*")
    assert (folder / "queue.db").is_file()
    assert (folder / "results.db").is_file()
    assert f"  rm -r {folder}" in lines

    printed = [shlex.split(line) for line in lines if line.startswith(f"  {CARAVEL} ")]
    assert [argv[1] for argv in printed] == ["status", "jobs", "dashboard"]
    status, jobs, dashboard = printed
    # Run as printed, from another folder: the URL is absolute.
    shown = subprocess.run(status, cwd=tmp_path, capture_output=True, text=True, check=False)
    assert shown.returncode == 0, shown.stderr
    counts = subprocess.run(
        [*status, "--json"], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    (queue,) = json.loads(counts.stdout)["queues"]
    assert (queue["queue"], queue["completed"], queue["ready"]) == ("reports", 3, 0)
    listed = subprocess.run(jobs, cwd=tmp_path, capture_output=True, text=True, check=False)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.count("completed") == 3
    # The dashboard as printed, on a free port instead of its default 8765.
    port = free_port()
    page = served_page(
        [*dashboard, "--bind", f"127.0.0.1:{port}"], f"http://127.0.0.1:{port}/", cwd=tmp_path
    )
    assert "reports" in page
