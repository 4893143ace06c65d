"""Django configured once for this process: a SQLite file as ``default``, a throwaway
PostgreSQL database as ``pg`` and a throwaway MariaDB database as ``maria`` (Django's ``mysql``
engine through PyMySQL, ``pymysql.install_as_MySQLdb()``), each holding its own queue (the
backends ``default``, ``pg`` and ``maria`` share those databases), and a backend ``separate``
whose queue has a SQLite file of its own. ``manage.py migrate``'s own code
(``call_command("migrate")``) applies the queue schemas, through the app's migration.

Django's settings are process-wide, so the tests here run Django's code in this process and
our worker in it through :func:`caravel.testing.drain`. Without Django installed (a venv
without the ``django`` extra) the directory is not collected, except under ``CI=true``, where
that is an error.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from tests.support.databases import (
    IN_CI,
    create_mariadb_database,
    create_pg_database,
    drop_mariadb_database,
    drop_pg_database,
    empty_queue_tables,
)

try:
    import django
except ImportError:
    if IN_CI:
        raise
    collect_ignore_glob = ["test_*.py"]
try:
    import django.tasks  # noqa: F401
except ImportError:  # Django 5.2: Django 6's own tests run in .venv312 only
    collect_ignore = ["test_upstream.py"]

ALIASES = ("default", "pg", "maria")
#: Each server alias's reason to be skipped, kept under this key when its server is unreachable.
_MISSING = {"pg": "pg_missing", "maria": "maria_missing"}
_STATE: dict[str, Any] = {}


def _server_settings(
    alias: str, engine: str, create: Any
) -> tuple[dict[str, Any] | None, str | None]:
    """Django's settings for a new database made by ``create``, and its URL; ``None`` and
    ``None`` (the reason kept for :func:`alias`) when the server cannot be reached."""
    try:
        url: str = create("caravel_django")
    except pytest.skip.Exception as skipped:
        _STATE[_MISSING[alias]] = str(skipped)
        return None, None
    parsed = make_url(url)
    settings = {
        "ENGINE": engine,
        "NAME": parsed.database,
        "USER": parsed.username or "",
        "PASSWORD": parsed.password or "",
        "HOST": parsed.host or "",
        "PORT": str(parsed.port or ""),
    }
    return settings, url


def _maria_settings() -> tuple[dict[str, Any] | None, str | None]:
    # Django's mysql engine imports MySQLdb: PyMySQL stands in for mysqlclient (which has no
    # wheel for Linux), and enqueue runs on its connection.
    import pymysql

    pymysql.install_as_MySQLdb()
    settings, url = _server_settings("maria", "django.db.backends.mysql", create_mariadb_database)
    if settings is not None:
        # Django's own default is utf8 (three bytes at most): keys and payloads may hold four.
        settings["OPTIONS"] = {"charset": "utf8mb4"}
    return settings, url


def _configure(tmp: Path) -> None:
    from django.conf import settings

    import django

    pg, pg_url = _server_settings("pg", "django.db.backends.postgresql", create_pg_database)
    maria, maria_url = _maria_settings()
    databases: dict[str, Any] = {
        "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(tmp / "app.db")}
    }
    backend = "caravel.contrib.django.CaravelBackend"
    tasks: dict[str, Any] = {
        "default": {"BACKEND": backend, "QUEUES": ["default", "emails"]},
        "separate": {
            "BACKEND": backend,
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"URL": f"sqlite:///{tmp / 'separate.db'}"},
        },
    }
    for alias, server in (("pg", pg), ("maria", maria)):
        if server is not None:
            databases[alias] = server
            tasks[alias] = {
                "BACKEND": backend,
                "QUEUES": ["default", "emails"],
                "OPTIONS": {"DATABASE": alias, "MAX_ATTEMPTS": 3},
            }
    settings.configure(
        DEBUG=False,
        USE_TZ=True,
        SECRET_KEY="tests-only",
        DATABASES=databases,
        TASKS=tasks,
        INSTALLED_APPS=[
            "django.contrib.admin",
            "django.contrib.contenttypes",
            "django.contrib.auth",
            "django.contrib.sessions",
            "django.contrib.messages",
            "caravel.contrib.django",
            "tests.django.app",
        ],
        ROOT_URLCONF="tests.django.urls",
        MIDDLEWARE=[
            "django.contrib.sessions.middleware.SessionMiddleware",
            "django.middleware.csrf.CsrfViewMiddleware",
            "django.contrib.auth.middleware.AuthenticationMiddleware",
            "django.contrib.messages.middleware.MessageMiddleware",
        ],
        TEMPLATES=[
            {
                "BACKEND": "django.template.backends.django.DjangoTemplates",
                "APP_DIRS": True,
                "OPTIONS": {
                    "context_processors": [
                        "django.template.context_processors.request",
                        "django.contrib.auth.context_processors.auth",
                        "django.contrib.messages.context_processors.messages",
                    ]
                },
            }
        ],
    )
    django.setup()
    from django.core.management import call_command

    for alias in databases:
        call_command("migrate", database=alias, verbosity=0)
    _STATE["pg_url"] = pg_url
    _STATE["maria_url"] = maria_url
    _STATE["tmp"] = tmp


@pytest.fixture(scope="session", autouse=True)
def django_configured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    if "tmp" not in _STATE:
        _configure(tmp_path_factory.mktemp("django"))
    yield
    from django.db import connections

    from caravel.contrib.django.queues import close_queues

    close_queues()
    connections.close_all()
    if _STATE.get("pg_url"):
        drop_pg_database(_STATE["pg_url"])
    if _STATE.get("maria_url"):
        drop_mariadb_database(_STATE["maria_url"])


def queue_url(alias: str) -> str:
    from caravel.contrib.django.compat import task_backends

    url: str = task_backends[alias].config.queue_url()
    return url


@pytest.fixture(params=ALIASES)
def alias(request: pytest.FixtureRequest) -> str:
    """The backend under test, once per database, its queue emptied first."""
    name: str = request.param
    missing = _STATE.get(_MISSING.get(name, ""))
    if missing is not None:
        if IN_CI:
            pytest.fail(missing, pytrace=False)
        pytest.skip(missing)
    empty_queue(name)
    from tests.django.app.tasks import SEEN

    SEEN.clear()
    return name


def empty_queue(alias: str) -> None:
    empty_queue_tables(queue_url(alias))


@pytest.fixture
def tasks() -> Any:
    from tests.django.app import tasks as module

    return module


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.django)
