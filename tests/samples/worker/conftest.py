"""Fixtures for the worker sample's tests: its environment for a new, empty database of each
kind (a folder for SQLite's two files; an empty PostgreSQL or MariaDB database holding both the
queue and the results), and nothing of the developer's own settings."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.databases import (
    create_mariadb_database,
    create_pg_database,
    drop_mariadb_database,
    drop_pg_database,
)

PREFIX = "CARAVEL_WORKER_"


def sample_environment(backend: str, place: str) -> dict[str, str]:
    """The sample's variables for ``backend``: ``place`` is SQLite's folder or the server's
    database URL."""
    if backend == "sqlite":
        return {"CARAVEL_WORKER_DIRECTORY": place}
    provider = "postgres" if backend == "postgresql" else "mariadb"
    return {"CARAVEL_WORKER_DATABASE_PROVIDER": provider, "CARAVEL_WORKER_DATABASE_URL": place}


@pytest.fixture
def worker_env(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, str]]:
    """The sample's variables for a new, empty database of the parametrized kind, also set in
    this process's environment (the sample's handler reads it)."""
    for name in list(os.environ):
        if name.startswith(PREFIX):
            monkeypatch.delenv(name)
    if backend == "sqlite":
        folder = tmp_path / "sample"
        folder.mkdir()
        place, drop = str(folder), None
    elif backend == "mariadb":
        place, drop = create_mariadb_database("caravel_worker_sample"), drop_mariadb_database
    else:
        place, drop = create_pg_database("caravel_worker_sample"), drop_pg_database
    variables = sample_environment(backend, place)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    try:
        yield variables
    finally:
        if drop is not None:
            drop(place)
