"""The testing helpers run on the in-memory store too: ``db_url`` here is also ``memory://``
(a fresh, private queue for each queue object that opens it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from caravel.store.schema import metadata
from tests.conftest import BACKENDS
from tests.support.databases import SqliteTemplate, truncate_pg


@pytest.fixture(params=(*BACKENDS, "memory"))
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def db_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated, empty queue database of the parametrized backend."""
    if backend == "memory":
        return "memory://"
    if backend == "sqlite":
        template: SqliteTemplate = request.getfixturevalue("sqlite_template")
        return template.copy_to(tmp_path / "queue.db")
    url: str = request.getfixturevalue("pg_session_url")
    truncate_pg(url, tuple(metadata.tables))
    return url
