"""Fixtures for the backend sample's tests. ``settings`` runs a test once per database: a fresh
copy of a migrated SQLite file, and a migrated PostgreSQL database and a migrated MariaDB
database, each emptied before each test."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from argon2 import PasswordHasher
from caravel_samples.backend import schema, security
from caravel_samples.backend.settings import Settings

from caravel.store.schema import RELEASES_TABLE
from caravel.store.schema import metadata as queue_metadata
from tests.samples.backend.support import APP_TABLES, make_settings
from tests.support.databases import mariadb_database, pg_database, truncate_mariadb, truncate_pg


@pytest.fixture(autouse=True)
def _no_backend_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings in these tests come from the tests alone, never from the developer's shell."""
    import os

    for name in list(os.environ):
        if name.upper().startswith("CARAVEL__"):
            monkeypatch.delenv(name)


@pytest.fixture(autouse=True)
def _cheap_password_hashes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Argon2id with the smallest cost, so the suite is not dominated by key stretching (the
    real parameters take about 0.3 s per hash here). The subprocess tests use the real ones."""
    monkeypatch.setattr(
        security, "_hasher", PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)
    )
    security._decoy_hash.cache_clear()


@pytest.fixture(scope="session")
def backend_sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("backend-template") / "template.db"
    schema.migrate_all(make_settings("sqlite", str(path)))
    return path


@pytest.fixture(scope="session")
def backend_pg_url() -> Iterator[str]:
    with pg_database(migrated=False) as url:
        schema.migrate_all(make_settings("postgres", url))
        yield url


@pytest.fixture(scope="session")
def backend_mariadb_url() -> Iterator[str]:
    with mariadb_database(migrated=False) as url:
        schema.migrate_all(make_settings("mariadb", url))
        yield url


@pytest.fixture
def database(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """(provider, identity database) of a migrated, empty database of the parametrized kind."""
    if backend == "sqlite":
        template: Path = request.getfixturevalue("backend_sqlite_template")
        target = tmp_path / "backend.db"
        shutil.copyfile(template, target)
        return "sqlite", str(target)
    if backend == "mariadb":
        maria: str = request.getfixturevalue("backend_mariadb_url")
        truncate_mariadb(maria, (*APP_TABLES, *queue_metadata.tables, RELEASES_TABLE))
        return "mariadb", maria
    url: str = request.getfixturevalue("backend_pg_url")
    truncate_pg(url, APP_TABLES)
    return "postgres", url


@pytest.fixture
def settings(database: tuple[str, str]) -> Settings:
    return make_settings(*database)
