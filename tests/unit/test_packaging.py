"""The wheel must carry every package: pyproject lists them explicitly (samples live outside
``src/``), so a new package that is not listed would be missing from installs."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _packages_on_disk(base: Path, name: str) -> set[str]:
    found = set()
    for init in base.rglob("__init__.py"):
        if "__pycache__" in init.parts:
            continue
        relative = init.parent.relative_to(base)
        found.add(".".join((name, *relative.parts)) if relative.parts else name)
    return found


def test_every_package_is_listed_in_pyproject() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(config["tool"]["setuptools"]["packages"])
    on_disk = _packages_on_disk(ROOT / "src" / "caravel", "caravel") | _packages_on_disk(
        ROOT / "samples", "caravel_samples"
    )
    assert on_disk == listed
