"""The pinned Django sdist's ``tests/tasks``, downloaded with pip from PyPI once and kept under
``.cache/django-upstream/`` (git-ignored). ``python -m tests.django.upstream.fetch`` fetches
it ahead of the tests and prints the folder to put on ``sys.path``."""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

__all__ = ["CACHE", "pinned_version", "upstream_root"]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
CACHE = ROOT / ".cache" / "django-upstream"
#: The test package taken from the sdist; nothing else of it is kept.
PACKAGE = "tasks"


def pinned_version() -> str:
    """The version ``constraints.txt`` pins (``django==X``)."""
    text = (HERE / "constraints.txt").read_text(encoding="utf-8")
    found = re.search(r"^django==(\S+)$", text, re.MULTILINE)
    if found is None:
        raise RuntimeError(f"{HERE / 'constraints.txt'} pins no django==VERSION")
    return found.group(1)


def upstream_root(version: str | None = None) -> Path:
    """The folder holding Django's ``tasks`` test package for ``version`` (the pinned one),
    downloaded first if it is not cached yet."""
    version = version or pinned_version()
    root = CACHE / f"django-{version}" / "tests"
    if (root / PACKAGE / "__init__.py").is_file():
        return root
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as scratch:
        work = Path(scratch)
        subprocess.run(
            [
                *(sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"),
                *("--no-binary", ":all:", "--dest", str(work), f"django=={version}"),
            ],
            check=True,
        )
        (sdist,) = work.glob("*.tar.gz")
        inside = f"django-{version}/tests/{PACKAGE}/"
        with tarfile.open(sdist) as archive:
            members = [m for m in archive.getmembers() if m.name.startswith(inside)]
            if not members:
                raise RuntimeError(f"{sdist.name} has no {inside}")
            archive.extractall(work / "out", members=members, filter="data")
        try:
            # Whole or not at all, and only once: a rename onto a folder another process
            # (another pytest worker) has just put there fails, and that one is used.
            (work / "out" / f"django-{version}").rename(root.parent)
        except OSError:
            if not (root / PACKAGE / "__init__.py").is_file():
                raise
    return root


if __name__ == "__main__":
    print(upstream_root())
