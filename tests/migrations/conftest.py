"""An empty database of each kind, for the migration tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.databases import create_pg_database, drop_pg_database, sqlite_url

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
]


@pytest.fixture(params=BACKENDS)
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database with nothing in it: a brand new, empty SQLite file, or a new PostgreSQL
    database."""
    if request.param == "sqlite":
        path = tmp_path / "empty.db"
        path.touch()
        yield sqlite_url(path)
        return
    url = create_pg_database("caravel_migrations")
    try:
        yield url
    finally:
        drop_pg_database(url)
