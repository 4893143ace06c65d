"""The wheel must carry every package: pyproject lists them explicitly (samples live outside
``src/``), so a new package that is not listed would be missing from installs."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _packages_on_disk(base: Path, name: str) -> set[str]:
    """Every directory Python could import: those with an ``__init__.py`` and those that only
    hold data files (templates, static assets), which setuptools also treats as packages."""
    found = set()
    for path in base.rglob("*"):
        if not path.is_file() or "__pycache__" in path.parts or path.name.startswith("."):
            continue
        relative = path.parent.relative_to(base)
        found.add(".".join((name, *relative.parts)) if relative.parts else name)
    return found


def test_every_package_is_listed_in_pyproject() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(config["tool"]["setuptools"]["packages"])
    on_disk = _packages_on_disk(ROOT / "src" / "caravel", "caravel") | _packages_on_disk(
        ROOT / "samples", "caravel_samples"
    )
    assert on_disk == listed
