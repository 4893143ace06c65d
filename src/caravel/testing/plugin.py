"""Caravel's pytest plugin: fixtures for tests of code that enqueues and runs jobs.

Installed with the library, it registers itself through the ``pytest11`` entry point (name
``caravel``); without the entry point, load it with ``-p caravel.testing.plugin``. Every fixture
name starts with ``caravel_``.

``caravel_registry`` is the application's :class:`~caravel.JobRegistry`: override it in your
``conftest.py``. The default fails the test with a one-line message saying so, because a queue
on an empty registry would only fail later, on the first enqueue, with a less helpful error.
The queue fixtures run on ``caravel_clock``, a :class:`~caravel.testing.ManualClock`; all but
``caravel_sync_queue`` are async and need pytest-asyncio. The plugin loads in every pytest run
of a project that has Caravel installed, so it imports the queue, the worker and the drivers
only inside the fixtures that need them.
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from caravel.testing.clock import ManualClock

if TYPE_CHECKING:
    from caravel.queue import DatabaseQueue
    from caravel.registry import JobRegistry
    from caravel.sync import SyncQueue
    from caravel.testing.databases import SqliteTemplate
    from caravel.testing.immediate import ImmediateQueue

__all__ = [
    "caravel_clock",
    "caravel_immediate_queue",
    "caravel_memory_queue",
    "caravel_postgres_queue",
    "caravel_postgres_url",
    "caravel_queue",
    "caravel_registry",
    "caravel_sqlite_queue",
    "caravel_sqlite_template",
    "caravel_sync_queue",
    "pytest_addoption",
]

#: Where the PostgreSQL server's URL comes from when the option is not given.
URL_VARIABLE = "CARAVEL_TEST_POSTGRES_URL"


F = TypeVar("F", bound=Callable[..., Any])


def _async_fixture(function: F) -> F:
    """A pytest-asyncio fixture; without pytest-asyncio installed, a fixture that fails with
    what to install (the plugin itself loads in every pytest run, so it must not need it)."""
    try:
        plugin = importlib.import_module("pytest_asyncio")
    except ImportError:

        @functools.wraps(function)
        def unavailable(*args: Any, **kwargs: Any) -> Any:
            pytest.fail(
                f"{function.__name__}: needs pytest-asyncio (pip install pytest-asyncio)",
                pytrace=False,
            )

        return pytest.fixture(unavailable)  # type: ignore[return-value]
    decorated: F = plugin.fixture(function)
    return decorated


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("caravel")
    group.addoption(
        "--caravel-postgres-url",
        default=None,
        help=(
            "PostgreSQL server for caravel_postgres_queue: a throwaway database is created on "
            f"it for the session (default: ${URL_VARIABLE}; without either those tests skip)"
        ),
    )


@pytest.fixture
def caravel_registry() -> JobRegistry:
    """The application's registry. Override this fixture in your conftest.py."""
    pytest.fail(
        "caravel_registry: define a caravel_registry fixture in your conftest.py that returns "
        "your application's JobRegistry",
        pytrace=False,
    )


@pytest.fixture
def caravel_clock() -> ManualClock:
    """A clock that moves only when the test advances it; every queue fixture uses it."""
    return ManualClock()


@pytest.fixture(scope="session")
def caravel_sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> SqliteTemplate:
    """A migrated SQLite file, made once per session and copied for each test."""
    from caravel.testing.databases import SqliteTemplate

    return SqliteTemplate(tmp_path_factory.mktemp("caravel-template"))


@_async_fixture
async def caravel_sqlite_queue(
    caravel_registry: JobRegistry,
    caravel_clock: ManualClock,
    caravel_sqlite_template: SqliteTemplate,
    tmp_path: Path,
) -> AsyncIterator[DatabaseQueue]:
    """A queue on a fresh, migrated SQLite file in the test's ``tmp_path``."""
    from caravel.queue import DatabaseQueue

    url = caravel_sqlite_template.copy_to(tmp_path / "caravel-queue.db")
    async with DatabaseQueue(url, caravel_registry, clock=caravel_clock) as queue:
        yield queue


@pytest.fixture
def caravel_sync_queue(
    caravel_registry: JobRegistry,
    caravel_clock: ManualClock,
    caravel_sqlite_template: SqliteTemplate,
    tmp_path: Path,
) -> Iterator[SyncQueue]:
    """A :class:`~caravel.SyncQueue` on a fresh, migrated SQLite file, for synchronous tests
    (no pytest-asyncio needed). Move the clock with ``queue.call(caravel_clock.advance, ...)``
    or ``drain(queue, advance=True)``."""
    from caravel.sync import SyncQueue

    url = caravel_sqlite_template.copy_to(tmp_path / "caravel-sync.db")
    with SyncQueue(url, caravel_registry, clock=caravel_clock) as queue:
        yield queue


@_async_fixture
async def caravel_immediate_queue(
    caravel_registry: JobRegistry,
    caravel_clock: ManualClock,
    caravel_sqlite_template: SqliteTemplate,
    tmp_path: Path,
) -> AsyncIterator[ImmediateQueue]:
    """An :class:`~caravel.testing.ImmediateQueue` (failures raise) on a fresh SQLite file: each
    enqueue runs its job before it returns."""
    from caravel.testing.immediate import ImmediateQueue

    url = caravel_sqlite_template.copy_to(tmp_path / "caravel-immediate.db")
    async with ImmediateQueue(caravel_registry, target=url, clock=caravel_clock) as queue:
        yield queue


@_async_fixture
async def caravel_memory_queue(
    caravel_registry: JobRegistry, caravel_clock: ManualClock
) -> AsyncIterator[DatabaseQueue]:
    """A queue on the per-process memory store (``memory://``), empty for each test."""
    from caravel.queue import DatabaseQueue

    async with DatabaseQueue("memory://", caravel_registry, clock=caravel_clock) as queue:
        yield queue


@pytest.fixture(scope="session")
def caravel_postgres_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A migrated database of its own on the server ``--caravel-postgres-url`` (or
    ``$CARAVEL_TEST_POSTGRES_URL``) names, for the whole session; dropped at its end.

    Skipped without a URL. An unreachable server skips too, except under ``CI=true``, where a
    URL that was given must work and the test fails instead."""
    admin = request.config.getoption("--caravel-postgres-url") or os.environ.get(URL_VARIABLE)
    if not admin:
        pytest.skip(f"no PostgreSQL server: pass --caravel-postgres-url or set ${URL_VARIABLE}")
    from caravel.testing.databases import PostgresUnreachable, postgres_database

    try:
        with postgres_database(admin) as url:
            yield url
    except PostgresUnreachable as exc:
        message = f"PostgreSQL at the given URL is not reachable: {exc.reason}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


@_async_fixture
async def caravel_postgres_queue(
    caravel_postgres_url: str, caravel_registry: JobRegistry, caravel_clock: ManualClock
) -> AsyncIterator[DatabaseQueue]:
    """A queue on the session's PostgreSQL database, its tables emptied first."""
    from caravel.queue import DatabaseQueue
    from caravel.testing.databases import truncate_queue_tables

    truncate_queue_tables(caravel_postgres_url)
    async with DatabaseQueue(caravel_postgres_url, caravel_registry, clock=caravel_clock) as queue:
        yield queue


@_async_fixture
async def caravel_queue(caravel_sqlite_queue: DatabaseQueue) -> DatabaseQueue:
    """The queue most tests want: :func:`caravel_sqlite_queue` (override it to pick another)."""
    return caravel_sqlite_queue
