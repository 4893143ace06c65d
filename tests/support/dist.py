"""The sdist and wheel `make dist` builds, made once per test session and shared by its
processes: the docs suite installs the wheel as ``$CARAVEL_PACKAGE`` (docs/install.md) and
``tests/acceptance/test_dist.py`` installs both into fresh virtual environments."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Dist:
    wheel: Path
    sdist: Path


def built_dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    """Run `make dist` from this checkout once per session. Under pytest-xdist the workers'
    temporary folders share a parent, so the first worker builds there under a lock and the
    others wait for it and reuse its files."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    folder = base / "caravel-dist"
    with (base / "caravel-dist.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "built").exists():
            _make_dist(folder)
            (folder / "built").touch()
    (wheel,) = folder.glob("caravel_queue-*.whl")
    (sdist,) = folder.glob("caravel_queue-*.tar.gz")
    return Dist(wheel=wheel, sdist=sdist)


def _make_dist(folder: Path) -> None:
    # VENV: the environment running the tests, whichever it is (it has `build` from [dev]).
    argv = ["make", "-C", str(ROOT), "dist", f"DIST={folder}", f"VENV={sys.prefix}"]
    # Not the settings of a `make test` this session may run under.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, check=False)
    if result.returncode != 0:
        raise AssertionError(
            f"make dist exited {result.returncode}:\n{result.stdout}{result.stderr}"
        )
