"""One page run per (page, backend) and test process: a folder of its own and a database."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docs.blocks import ROOT
from tests.docs.runner import PageRun
from tests.support.databases import (
    create_mariadb_database,
    create_pg_database,
    drop_mariadb_database,
    drop_pg_database,
)
from tests.support.dist import built_dist


class PageRuns:
    def __init__(self, root: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
        self.root = root
        self._tmp_path_factory = tmp_path_factory
        self.runs: dict[tuple[str, str], PageRun] = {}
        self.databases: list[str] = []
        self._copy: Path | None = None

    def checkout_copy(self) -> Path:
        """The checkout's tracked files, as in a fresh clone: an install from it builds there,
        never in the checkout the suite runs from."""
        if self._copy is None:
            listed = subprocess.run(
                ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
            ).stdout.decode()
            self._copy = self.root / "checkout"
            for name in filter(None, listed.split("\0")):
                source = ROOT / name
                if source.is_file():  # a file deleted but not yet committed is left out
                    target = self._copy / name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(source, target)
        return self._copy

    def package(self) -> Path:
        """The wheel `make dist` builds, once per session: what CARAVEL_PACKAGE names."""
        return built_dist(self._tmp_path_factory).wheel

    def get(self, page: str, backend: str, checkout: Path = ROOT) -> PageRun:
        key = (page, backend)
        if key not in self.runs:
            folder = self.root / f"{page.replace('/', '_').replace(':', '_')}-{backend}"
            folder.mkdir()
            if backend == "postgresql":
                url = create_pg_database("caravel_docs")
                self.databases.append(url)
            elif backend == "mariadb":
                url = create_mariadb_database("caravel_docs")
                self.databases.append(url)
            else:
                url = "sqlite:///queue.db"
            self.runs[key] = PageRun(folder, backend, url, checkout=checkout, package=self.package)
        return self.runs[key]

    def close(self) -> None:
        for run in self.runs.values():
            with contextlib.suppress(AssertionError):  # reported by the block that was running
                run.stop_background()
        for url in self.databases:
            if url.startswith("mariadb"):
                drop_mariadb_database(url)
            else:
                drop_pg_database(url)


@pytest.fixture(scope="session")
def page_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PageRuns]:
    runs = PageRuns(tmp_path_factory.mktemp("docs"), tmp_path_factory)
    yield runs
    runs.close()
