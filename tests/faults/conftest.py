"""Fixtures of the fault suite: ``app_url`` is the application database (effects and ledger) of
the same backend as ``db_url``, the queue database; ``pg_cluster`` is a PostgreSQL cluster of this
test process's own (:mod:`tests.faults.pgserver`), for the tests that restart the server, turn a
database read-only or terminate its sessions, with a queue and an app database on it;
``mariadb_server`` is the same for MariaDB (:mod:`tests.faults.mariaserver`); ``nats_server`` is a
NATS server with JetStream of this test process's own (:mod:`tests.faults.natsserver`), for the
bridge's broker restarts."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from caravel.store.schema import RELEASES_TABLE, metadata
from tests.faults.harness import app_database, clear_app_database
from tests.faults.mariaserver import PrivateMariadb
from tests.faults.natsserver import PrivateNats
from tests.faults.pgserver import PrivateCluster
from tests.support.databases import IN_CI, truncate_mariadb, truncate_pg


@pytest.fixture(scope="session")
def pg_app_session_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with app_database("postgresql", tmp_path_factory.mktemp("pg-app")) as url:
        yield url


@pytest.fixture(scope="session")
def mariadb_app_session_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with app_database("mariadb", tmp_path_factory.mktemp("maria-app")) as url:
        yield url


@pytest.fixture
def app_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty app database of the parametrized backend."""
    if backend == "sqlite":
        with app_database("sqlite", tmp_path) as url:
            return url
    fixture = "mariadb_app_session_url" if backend == "mariadb" else "pg_app_session_url"
    url: str = request.getfixturevalue(fixture)
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


# ----- the private MariaDB server -----------------------------------------------------------


@pytest.fixture(scope="session")
def mariadb_server() -> Iterator[PrivateMariadb]:
    """A throwaway MariaDB server, started once per test process and removed at its end.
    Skipped when it cannot be made, except under ``CI=true``, where that fails the test."""
    try:
        server = PrivateMariadb.create()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        message = f"cannot make a private MariaDB server: {exc}"
        if IN_CI:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    try:
        yield server
    finally:
        server.destroy()


@pytest.fixture(scope="session")
def private_maria_session_urls(
    mariadb_server: PrivateMariadb, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """A migrated queue database and an app database on the private MariaDB server."""
    directory = tmp_path_factory.mktemp("private-maria-app")
    with (
        mariadb_server.database(migrated=True) as queue_url,
        app_database("mariadb", directory, admin_url=mariadb_server.admin_url) as app_url,
    ):
        yield queue_url, app_url


@pytest.fixture
def private_maria_urls(
    mariadb_server: PrivateMariadb, private_maria_session_urls: tuple[str, str]
) -> tuple[str, str]:
    """The queue and the app database on the private MariaDB server, emptied (and the server
    up)."""
    mariadb_server.ensure_running()
    queue_url, app_url = private_maria_session_urls
    truncate_mariadb(queue_url, (*metadata.tables, RELEASES_TABLE))
    clear_app_database(app_url)
    return queue_url, app_url


# ----- the private NATS server --------------------------------------------------------------


@pytest.fixture(scope="session")
def nats_server() -> Iterator[PrivateNats]:
    """A throwaway ``nats-server -js``, started once per test process and removed at its end.
    Skipped when it cannot be started, except under ``CI=true``, where that fails the test."""
    try:
        server = PrivateNats.create()
    except (RuntimeError, OSError) as exc:
        message = f"cannot start a private NATS server: {exc}"
        if IN_CI:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    try:
        yield server
    finally:
        server.destroy()


@pytest.fixture
def private_nats(nats_server: PrivateNats) -> PrivateNats:
    """The private NATS server, up (a test before this one may have left it down)."""
    nats_server.ensure_running()
    return nats_server
