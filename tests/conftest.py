"""Shared fixtures. ``db_url`` runs a test once per database: a fresh SQLite file and a clean,
migrated PostgreSQL database.

Under pytest-xdist (``make test`` runs with ``-n``) every worker process has databases of its
own: the session's PostgreSQL database is named after the process id, SQLite files live in each
test's ``tmp_path``. Tests marked ``serial`` all run on one worker, one after another (the
``serial`` xdist group, with ``--dist loadgroup``), never side by side with each other."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from uuid import uuid4

import pytest

from caravel.store.schema import RELEASES_TABLE, metadata
from tests.support.databases import (
    SqliteTemplate,
    mariadb_database,
    pg_database,
    truncate_mariadb,
    truncate_pg,
)

BACKENDS = ("sqlite", "postgresql", "mariadb")
SERIAL_GROUP = "serial"


def pytest_configure(config: pytest.Config) -> None:
    """A suite started in the background of a non-interactive shell inherits SIGINT ignored,
    and so would every process a test starts: a Ctrl+C test would then wait for a worker that
    never hears it. Tests send SIGINT on purpose, so they get the ordinary disposition."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``serial`` tests join one xdist group (it takes effect with ``--dist loadgroup``)."""
    for item in items:
        if item.get_closest_marker("serial") is not None:
            item.add_marker(pytest.mark.xdist_group(SERIAL_GROUP))
    _keep_groups(config, items)


def _keep_groups(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep each xdist group on one worker under ``--dist loadgroup``.

    pytest-xdist 3.8 marks a test's group by appending ``@group`` to ``item._nodeid``, which
    pytest 9 no longer reads (a node's id is ``item._id``), so groups were lost: ``serial``
    tests ran side by side and a docs page's blocks ran on two workers at once. Do what xdist
    means to; on a pytest that still reads ``_nodeid`` xdist's own marking holds."""
    if not getattr(config.option, "loadgroup", False):
        return
    try:
        from _pytest.nodeid import NodeId  # type: ignore[import-not-found]
    except ImportError:
        return
    for item in items:
        mark = item.get_closest_marker("xdist_group")
        if mark is None:
            continue
        group = mark.args[0] if mark.args else mark.kwargs.get("name", "default")
        if not item.nodeid.endswith(f"@{group}"):
            item._id = NodeId.parse(f"{item.nodeid}@{group}")  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> SqliteTemplate:
    return SqliteTemplate(tmp_path_factory.mktemp("sqlite-template"))


@pytest.fixture(scope="session")
def pg_session_url() -> Iterator[str]:
    with pg_database(migrated=True) as url:
        yield url


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def db_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated, empty queue database of the parametrized backend."""
    if backend == "sqlite":
        template: SqliteTemplate = request.getfixturevalue("sqlite_template")
        return template.copy_to(tmp_path / "queue.db")
    if backend == "mariadb":
        return str(request.getfixturevalue("mariadb_url"))
    url: str = request.getfixturevalue("pg_session_url")
    truncate_pg(url, tuple(metadata.tables))
    return url


@pytest.fixture(params=(*BACKENDS, "memory"))
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated, empty queue of every kind: ``db_url``'s databases and ``memory://``, a named
    one of its own (so a dashboard or an inspector can open the same queue by its URL)."""
    if request.param == "memory":
        return f"memory://test-{uuid4().hex}"
    if request.param == "sqlite":
        template: SqliteTemplate = request.getfixturevalue("sqlite_template")
        return template.copy_to(tmp_path / "queue.db")
    if request.param == "mariadb":
        return str(request.getfixturevalue("mariadb_url"))
    url: str = request.getfixturevalue("pg_session_url")
    truncate_pg(url, tuple(metadata.tables))
    return url


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> str:
    """The migrated PostgreSQL test database, emptied."""
    url: str = request.getfixturevalue("pg_session_url")
    truncate_pg(url, tuple(metadata.tables))
    return url


@pytest.fixture(scope="session")
def mariadb_session_url() -> Iterator[str]:
    with mariadb_database(migrated=True) as url:
        yield url


@pytest.fixture
def mariadb_url(request: pytest.FixtureRequest) -> str:
    """The migrated MariaDB test database, emptied."""
    url: str = request.getfixturevalue("mariadb_session_url")
    truncate_mariadb(url, (*metadata.tables, RELEASES_TABLE))
    return url


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
