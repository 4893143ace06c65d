"""The queue's URL from Django's ``DATABASES`` (PostgreSQL, MariaDB through Django's ``mysql``
engine, a SQLite file), and which of Django's connections the queue can insert on."""

from __future__ import annotations

import os
from typing import Any

import pytest

from caravel import migrate
from caravel.contrib.django.config import django_database_url, shared_driver_problem
from caravel.migrations import HEAD


@pytest.mark.parametrize(
    ("settings", "url"),
    [
        (
            {"ENGINE": "django.db.backends.sqlite3", "NAME": "/srv/app/db.sqlite3"},
            "sqlite:////srv/app/db.sqlite3",
        ),
        (
            {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": "app",
                "USER": "app",
                "PASSWORD": "p@ss/word",
                "HOST": "db.internal",
                "PORT": "5433",
            },
            "postgresql://app:p%40ss%2Fword@db.internal:5433/app",
        ),
        (
            {
                "ENGINE": "django.db.backends.mysql",
                "NAME": "shop",
                "USER": "shop",
                "PASSWORD": "s3cret:",
                "HOST": "maria.internal",
                "PORT": "3306",
                "OPTIONS": {"charset": "utf8mb4"},
            },
            "mariadb://shop:s3cret%3A@maria.internal:3306/shop",
        ),
        (
            {"ENGINE": "django.db.backends.mysql", "NAME": "shop", "USER": "shop", "HOST": ""},
            "mariadb://shop@/shop",
        ),
        (
            {
                "ENGINE": "django.db.backends.mysql",
                "NAME": "shop",
                "USER": "shop",
                "HOST": "/run/mysqld/mysqld.sock",
            },
            "mariadb://shop@/shop?unix_socket=/run/mysqld/mysqld.sock",
        ),
        (
            {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": "app",
                "HOST": "/var/run/postgresql",
                "PORT": "5432",
            },
            "postgresql://:5432/app?host=/var/run/postgresql",
        ),
    ],
    ids=["sqlite", "postgresql", "mariadb", "mariadb-local", "mariadb-socket", "postgresql-socket"],
)
def test_each_django_database_gives_the_queue_its_url(settings: dict[str, Any], url: str) -> None:
    assert django_database_url("default", settings) == url


def test_a_database_caravel_does_not_run_on_is_refused_by_engine() -> None:
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(
        ImproperlyConfigured, match=r"PostgreSQL, MariaDB or SQLite, not 'x\.oracle'"
    ):
        django_database_url("default", {"ENGINE": "x.oracle", "NAME": "app"})


def _socket(alias: str) -> str:
    """The Unix socket (PostgreSQL: its folder) of ``alias``'s server, as the server says."""
    from django.db import connections

    with connections[alias].cursor() as cursor:
        if alias == "pg":
            cursor.execute("SHOW unix_socket_directories")
            return str(cursor.fetchone()[0]).split(",")[0].strip()
        cursor.execute("SELECT @@socket")
        return str(cursor.fetchone()[0])


@pytest.mark.parametrize("alias", ["pg", "maria"], indirect=True)
def test_a_socket_in_host_reaches_the_server_through_it(alias: str) -> None:
    from django.db import connections

    path = _socket(alias)
    if not os.path.exists(path):
        pytest.skip(f"the server's socket {path} is on another machine")
    settings = {**connections[alias].settings_dict, "HOST": path}
    url = django_database_url(alias, settings)
    assert "?" in url
    assert migrate.current(url) == HEAD


def test_the_queue_shares_a_mariadb_connection_of_pymysqls_only() -> None:
    refused = shared_driver_problem("default", "mysql", "MySQLdb")
    assert refused is not None
    assert "DATABASES['default']" in refused
    assert "pymysql.install_as_MySQLdb()" in refused
    assert "OPTIONS['URL']" in refused
    assert shared_driver_problem("default", "mysql", "pymysql") is None
    assert shared_driver_problem("default", "postgresql", "psycopg") is None
    assert shared_driver_problem("default", "sqlite", "sqlite3") is None


@pytest.mark.parametrize("alias", ["maria"], indirect=True)
def test_the_mariadb_backend_inserts_on_djangos_pymysql_connection(alias: str) -> None:
    from django.db import connections

    from caravel.contrib.django.compat import task_backends

    connection = connections[alias]
    connection.ensure_connection()
    assert type(connection.connection).__module__.startswith("pymysql")
    assert task_backends[alias].check() == []
    assert task_backends[alias].config.queue_url().startswith("mariadb://")
