"""The README's first command: what `make demo` runs once its install is done."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.docs.blocks import ROOT

pytestmark = pytest.mark.slow


def test_make_demo_script_runs_the_worker_sample_to_its_report() -> None:
    env = {**os.environ, "PYTHON": sys.executable}
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
    assert "report:" in result.stdout
