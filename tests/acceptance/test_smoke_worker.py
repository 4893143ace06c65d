"""Run ``scripts/smoke-worker.sh``: the worker sample end to end from a freshly built wheel in a
fresh virtual environment (crash after result, recovery, continuous mode, SIGTERM mid-job,
unmigrated folder, read-only status)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_worker_sample_smoke_script_passes() -> None:
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "smoke-worker.sh")],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "smoke test passed" in result.stdout
    assert '"claimed": false' in result.stdout
