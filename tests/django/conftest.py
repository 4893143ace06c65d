"""Django configured once for this process: a SQLite file as ``default`` and a throwaway
PostgreSQL database as ``pg``, each holding its own queue (the backends ``default`` and
``pg`` share those databases), and a backend ``separate`` whose queue has a SQLite file of
its own. ``manage.py migrate``'s own code (``call_command("migrate")``) applies the queue
schemas, through the app's migration.

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
    create_pg_database,
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

ALIASES = ("default", "pg")
_STATE: dict[str, Any] = {}


def _pg_settings() -> tuple[dict[str, Any] | None, str | None]:
    try:
        url = create_pg_database("caravel_django")
    except pytest.skip.Exception as skipped:
        _STATE["pg_missing"] = str(skipped)
        return None, None
    parsed = make_url(url)
    settings = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": parsed.database,
        "USER": parsed.username or "",
        "PASSWORD": parsed.password or "",
        "HOST": parsed.host or "",
        "PORT": str(parsed.port or ""),
    }
    return settings, url


def _configure(tmp: Path) -> None:
    from django.conf import settings

    import django

    pg, pg_url = _pg_settings()
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
    if pg is not None:
        databases["pg"] = pg
        tasks["pg"] = {
            "BACKEND": backend,
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"DATABASE": "pg", "MAX_ATTEMPTS": 3},
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


def queue_url(alias: str) -> str:
    from caravel.contrib.django.compat import task_backends

    url: str = task_backends[alias].config.queue_url()
    return url


@pytest.fixture(params=ALIASES)
def alias(request: pytest.FixtureRequest) -> str:
    """The backend under test, once per database, its queue emptied first."""
    name: str = request.param
    if name == "pg" and "pg_missing" in _STATE:
        if IN_CI:
            pytest.fail(_STATE["pg_missing"], pytrace=False)
        pytest.skip(_STATE["pg_missing"])
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
