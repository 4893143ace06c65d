"""Fixtures of the fault suite: ``app_url`` is the application database (effects and ledger) of
the same backend as ``db_url``, the queue database."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.harness import app_database, clear_app_database


@pytest.fixture(scope="session")
def pg_app_session_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with app_database("postgresql", tmp_path_factory.mktemp("pg-app")) as url:
        yield url


@pytest.fixture
def app_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty app database of the parametrized backend."""
    if backend == "sqlite":
        with app_database("sqlite", tmp_path) as url:
            return url
    url: str = request.getfixturevalue("pg_app_session_url")
    clear_app_database(url)
    return url


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    directory = tmp_path / "logs"
    directory.mkdir()
    return directory
