"""Fixtures of the fault suite: ``app_url`` is the application database (effects and ledger) of
the same backend as ``db_url``, the queue database; ``pg_cluster`` is a PostgreSQL cluster of this
test process's own (:mod:`tests.faults.pgserver`), for the tests that restart the server, turn a
database read-only or terminate its sessions, with a queue and an app database on it."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from caravel.store.schema import metadata
from tests.faults.harness import app_database, clear_app_database
from tests.faults.pgserver import PrivateCluster
from tests.support.databases import IN_CI, truncate_pg


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


# ----- the private cluster -----------------------------------------------------------------


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PrivateCluster]:
    """A throwaway PostgreSQL cluster, started once per test process and removed at its end.
    Skipped when it cannot be made, except under ``CI=true``, where that fails the test."""
    try:
        cluster = PrivateCluster.create()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        message = f"cannot make a private PostgreSQL cluster: {exc}"
        if IN_CI:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    try:
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture(scope="session")
def cluster_queue_session_url(pg_cluster: PrivateCluster) -> Iterator[str]:
    with pg_cluster.database(migrated=True) as url:
        yield url


@pytest.fixture(scope="session")
def cluster_app_session_url(
    pg_cluster: PrivateCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    directory = tmp_path_factory.mktemp("cluster-app")
    with app_database("postgresql", directory, admin_url=pg_cluster.admin_url) as url:
        yield url


@pytest.fixture
def cluster_queue_url(pg_cluster: PrivateCluster, cluster_queue_session_url: str) -> str:
    """The migrated queue database on the private cluster, emptied (and the cluster up)."""
    pg_cluster.ensure_running()
    truncate_pg(cluster_queue_session_url, tuple(metadata.tables))
    return cluster_queue_session_url


@pytest.fixture
def cluster_app_url(pg_cluster: PrivateCluster, cluster_app_session_url: str) -> str:
    """The app database (effects and ledger) on the private cluster, emptied."""
    pg_cluster.ensure_running()
    clear_app_database(cluster_app_session_url)
    return cluster_app_session_url
