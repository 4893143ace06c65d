"""Fixtures for the Flask sample's tests. ``settings`` runs a test once per database: a copy of
a migrated SQLite file (the queue's tables and the sample's ``signups`` in the one file), and a
migrated PostgreSQL database and a migrated MariaDB database, each emptied before each test. The
application runs on the ``caravel_clock`` fixture of Caravel's pytest plugin, a
:class:`~caravel.testing.ManualClock`, so its times are the test's."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from caravel_samples.flask import schema
from caravel_samples.flask.app import create_app
from caravel_samples.flask.services import Services, services_of
from caravel_samples.flask.settings import Settings
from flask import Flask
from flask.testing import FlaskClient

from caravel import SyncQueue
from caravel.store.schema import RELEASES_TABLE
from caravel.store.schema import metadata as queue_metadata
from caravel.testing import ManualClock
from tests.support.databases import mariadb_database, pg_database, truncate_mariadb, truncate_pg

#: Every table a test may have written: the sample's and the queue's.
TABLES = ("signups", "caravel_jobs")


@pytest.fixture(scope="session")
def flask_sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("flask-template") / "template.db"
    schema.migrate_all(Settings.from_url(f"sqlite:///{path}"))
    return path


@pytest.fixture(scope="session")
def flask_pg_url() -> Iterator[str]:
    with pg_database(migrated=False) as url:
        schema.migrate_all(Settings.from_url(url))
        yield url


@pytest.fixture(scope="session")
def flask_mariadb_url() -> Iterator[str]:
    with mariadb_database(migrated=False) as url:
        schema.migrate_all(Settings.from_url(url))
        yield url


@pytest.fixture
def settings(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    """A migrated, empty database of the parametrized kind."""
    if backend == "sqlite":
        template: Path = request.getfixturevalue("flask_sqlite_template")
        target = tmp_path / "signups.db"
        shutil.copyfile(template, target)
        return Settings.from_url(f"sqlite:///{target}")
    if backend == "mariadb":
        maria: str = request.getfixturevalue("flask_mariadb_url")
        truncate_mariadb(maria, (*TABLES, *queue_metadata.tables, RELEASES_TABLE))
        return Settings.from_url(maria)
    url: str = request.getfixturevalue("flask_pg_url")
    truncate_pg(url, TABLES)
    return Settings.from_url(url)


@pytest.fixture
def app(settings: Settings, caravel_clock: ManualClock) -> Iterator[Flask]:
    """The application on the plugin's manual clock (``caravel_clock``)."""
    application = create_app(settings, clock=caravel_clock)
    application.config["TESTING"] = True
    yield application
    services_of(application).close()


@pytest.fixture
def services(app: Flask) -> Services:
    return services_of(app)


@pytest.fixture
def queue(services: Services) -> SyncQueue:
    """The application's own queue: what its views enqueue through and its handler runs on."""
    return services.queue


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()
