"""The peers that need an interpreter of their own: oban (the Python port of Oban) needs Python
3.12 or newer, so it lives in ``bench/.venvs/oban`` on the first such Python found (set
``CARAVEL_BENCH_PYTHON312`` to choose one)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENVS = HERE / ".venvs"
#: What each such peer installs; the version is the one the measurements name.
REQUIREMENTS = {"oban": ["oban==0.7.0"]}


def _python312() -> str | None:
    chosen = os.environ.get("CARAVEL_BENCH_PYTHON312")
    if chosen:
        return chosen
    found = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[2-9].*/bin/python")))
    found += [p for p in map(shutil.which, ("python3.12", "python3.13")) if p]
    for python in found:
        # A pyenv shim is on the path even when its version is not installed.
        if subprocess.run([python, "--version"], capture_output=True).returncode == 0:
            return python
    return None


def python_for(peer: str) -> str | None:
    """The interpreter of ``peer``'s own virtual environment, made and filled on first use;
    ``None`` when no suitable Python is on this machine."""
    venv = VENVS / peer
    python = venv / "bin" / "python"
    stamp = venv / ".installed"
    wanted = " ".join(REQUIREMENTS[peer])
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return str(python)
    base = _python312()
    if base is None:
        return None
    subprocess.run([base, "-m", "venv", "--clear", str(venv)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", *REQUIREMENTS[peer]], check=True
    )
    stamp.write_text(wanted)
    return str(python)
