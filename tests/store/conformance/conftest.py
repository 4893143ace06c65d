"""The stores the conformance suite runs against, and the fixtures every test takes.

Each test runs once per entry of :data:`DATABASES`: ``store`` is the dialect's store under the
instrumented wrapper :func:`~caravel.store.open_store` returns, for a fresh, migrated, empty queue
of that kind (the wrapper adds the current trace context to new jobs when a tracer provider is
installed; the telemetry tests cover that), and ``reader`` what :func:`~caravel.store.open_reader`
returns for the same queue; ``another_store`` is a store on a second queue of the same kind. A
new store joins the suite by adding its entry here (and its case to :func:`_another`); no test
names a store.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from uuid import uuid4

import pytest

from caravel.store import open_reader, open_store
from caravel.store.protocol import ReadStore, Store
from tests.support.databases import SqliteTemplate, mariadb_database, pg_database


def _sqlite(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    template: SqliteTemplate = request.getfixturevalue("sqlite_template")
    return template.copy_to(tmp_path / "queue.db")


def _postgresql(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    url: str = request.getfixturevalue("pg_url")  # the session's database, truncated
    return url


def _mariadb(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    url: str = request.getfixturevalue("mariadb_url")  # the session's database, emptied
    return url


def _memory(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    # A name of this test's own: the store, second_store and reader share it, no other test does.
    return f"memory://conformance-{uuid4().hex}"


#: Every store under test, by name: how to get the URL of a migrated, empty queue.
DATABASES: dict[str, Callable[[pytest.FixtureRequest, Path], str]] = {
    "sqlite": _sqlite,
    "postgresql": _postgresql,
    "mariadb": _mariadb,
    "memory": _memory,
}


@contextmanager
def _another(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A second migrated, empty queue of ``backend``'s kind, apart from ``db_url``'s."""
    if backend == "postgresql":
        with pg_database(migrated=True) as url:
            yield url
    elif backend == "mariadb":
        with mariadb_database(migrated=True) as url:
            yield url
    elif backend == "sqlite":
        template: SqliteTemplate = request.getfixturevalue("sqlite_template")
        yield template.copy_to(tmp_path / "another.db")
    else:
        yield _memory(request, tmp_path)


@pytest.fixture(params=tuple(DATABASES))
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def db_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return DATABASES[backend](request, tmp_path)


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    opened = open_store(db_url)
    try:
        yield opened.inner
    finally:
        await opened.close()


@pytest.fixture
async def second_store(db_url: str) -> AsyncIterator[Store]:
    """Another store on the same queue, as a second process would open it."""
    opened = open_store(db_url)
    try:
        yield opened.inner
    finally:
        await opened.close()


@pytest.fixture
async def reader(db_url: str) -> AsyncIterator[ReadStore]:
    opened = open_reader(db_url)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def another_store(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Store]:
    """A store on another queue of the same kind, empty and migrated (its own database, created
    for the test and dropped after it): what a test makes a copy of the queue's history up to a
    point, as a promoted standby or a restored backup holds it."""
    with _another(backend, request, tmp_path) as url:
        opened = open_store(url)
        try:
            yield opened.inner
        finally:
            await opened.close()
