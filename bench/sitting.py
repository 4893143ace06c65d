"""What a report records about the sitting it comes from, so that the page (bench/page.py) can
say when and on which code its figures were taken and how busy the machine was: the start and
end in UTC, Caravel's commit (and whether the checkout had changes beyond it), and the load
average at both ends."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def loadavg() -> list[float]:
    """The load average over 1, 5 and 15 minutes."""
    return [float(v) for v in Path("/proc/loadavg").read_text().split()[:3]]


def _git(*arguments: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *arguments], cwd=ROOT, capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def commit() -> dict[str, Any]:
    """The checkout's commit (short) and whether tracked files differ from it; ``None`` for
    both outside a git checkout."""
    short = _git("rev-parse", "--short", "HEAD")
    changes = _git("status", "--porcelain", "--untracked-files=no")
    return {"commit": short, "dirty": None if changes is None else bool(changes)}


def begin() -> dict[str, Any]:
    """A sitting's record as it starts."""
    return {"started": _utc(), **commit(), "loadavg_start": loadavg()}


def end(sitting: dict[str, Any]) -> None:
    """Complete ``sitting``'s record as it ends."""
    sitting["ended"] = _utc()
    sitting["loadavg_end"] = loadavg()
