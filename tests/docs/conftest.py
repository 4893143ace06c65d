"""One page run per (page, backend) and test process: a folder of its own and a database."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docs.runner import PageRun
from tests.support.databases import create_pg_database, drop_pg_database


class PageRuns:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.runs: dict[tuple[str, str], PageRun] = {}
        self.databases: list[str] = []

    def get(self, page: str, backend: str) -> PageRun:
        key = (page, backend)
        if key not in self.runs:
            folder = self.root / f"{page.replace('/', '_').replace(':', '_')}-{backend}"
            folder.mkdir()
            if backend == "postgresql":
                url = create_pg_database("caravel_docs")
                self.databases.append(url)
            else:
                url = "sqlite:///queue.db"
            self.runs[key] = PageRun(folder=folder, backend=backend, database_url=url)
        return self.runs[key]

    def close(self) -> None:
        for run in self.runs.values():
            with contextlib.suppress(AssertionError):  # reported by the block that was running
                run.stop_background()
        for url in self.databases:
            drop_pg_database(url)


@pytest.fixture(scope="session")
def page_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PageRuns]:
    runs = PageRuns(tmp_path_factory.mktemp("docs"))
    yield runs
    runs.close()
