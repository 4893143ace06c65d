"""An empty database of each kind, for the migration tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.databases import (
    create_mariadb_database,
    create_pg_database,
    drop_mariadb_database,
    drop_pg_database,
    sqlite_url,
)

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
    pytest.param("mariadb", id="mariadb", marks=pytest.mark.mariadb),
]


@pytest.fixture(params=BACKENDS)
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database with nothing in it: a brand new, empty SQLite file, or a new PostgreSQL or
    MariaDB database."""
    if request.param == "sqlite":
        path = tmp_path / "empty.db"
        path.touch()
        yield sqlite_url(path)
        return
    if request.param == "mariadb":
        url = create_mariadb_database("caravel_migrations")
        try:
            yield url
        finally:
            drop_mariadb_database(url)
        return
    url = create_pg_database("caravel_migrations")
    try:
        yield url
    finally:
        drop_pg_database(url)


def is_mariadb(url: str) -> bool:
    return url.startswith("mariadb")


def skip_before_mariadb(url: str, revision: str) -> None:
    """Skip a test of what ``revision`` (before 0016) changes, on MariaDB: there it does
    nothing, as MariaDB's schema is created whole by 0016 (caravel.migrations.dialects)."""
    if is_mariadb(url):
        pytest.skip(f"{revision} does nothing on MariaDB, whose schema 0016 creates whole")
