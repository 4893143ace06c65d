"""The Python versions the package supports, each in a virtual environment of this checkout that
has the package (editable) and Django installed: ``.venv`` (``make install``, Python 3.11, or a
``.venv311`` beside it), ``.venv312`` and ``.venv313`` (``make interpreters`` makes them from
``~/.pyenv/versions``).
Tests that must hold on every version (what happens at interpreter exit) run their scripts
under each. Under ``CI=true`` a version without its environment fails the test; elsewhere it
is skipped with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.databases import IN_CI
from tests.support.processes import ROOT

__all__ = ["VERSIONS", "python_for"]

#: Every minor version the package supports and CI runs it on.
VERSIONS = ("3.11", "3.12", "3.13")


def _venv_version(venv: Path) -> str | None:
    """The ``X.Y.Z`` a virtual environment was made with, read from its ``pyvenv.cfg``."""
    try:
        lines = (venv / "pyvenv.cfg").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for line in lines:
        key, _, value = line.partition("=")
        if key.strip() in ("version", "version_info"):
            return value.strip()
    return None


def python_for(version: str) -> Path:
    """The ``python`` of this checkout's environment on ``version`` (``"3.12"``)."""
    for venv in (ROOT / ".venv", ROOT / f".venv{version.replace('.', '')}"):
        found = _venv_version(venv)
        python = venv / "bin" / "python"
        if found is not None and found.startswith(f"{version}.") and python.exists():
            return python
    message = (
        f"no virtual environment of this checkout on Python {version} (.venv or "
        f".venv{version.replace('.', '')}): `make interpreters` makes .venv312 and .venv313 "
        f"from ~/.pyenv/versions"
    )
    if IN_CI:
        pytest.fail(message, pytrace=False)
    pytest.skip(message)
