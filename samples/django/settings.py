"""The sample's settings. Its database (the application's tables and the queue together) is
``CARAVEL_DATABASE_URL``: ``sqlite:///shop.db`` (the default), ``postgresql://...`` or
``mariadb://...`` (``mysql://...`` for a MariaDB server too)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured


def database(url: str) -> dict[str, Any]:
    """Django's settings for a database URL."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        name = str(Path(parts.path[1:]).resolve())  # sqlite:///relative.db, sqlite:////abs.db
        # The test runner's database is a file beside it: the queue needs a file, not memory.
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": name,
            "TEST": {"NAME": name + ".test"},
            # A transaction that reads and then writes (the receipt task's) takes the write lock
            # when it begins, waiting its turn; begun deferred, it would fail at once, "database
            # is locked", whenever the worker's own writes landed between its read and its write.
            "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20},
        }
    if parts.scheme.startswith("postgresql"):
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": parts.path.lstrip("/"),
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
        }
    if parts.scheme.startswith(("mariadb", "mysql")):
        # Django's mysql engine imports MySQLdb; PyMySQL (the mariadb extra's) stands in for
        # mysqlclient, and the queue inserts on its connection, in Django's transaction.
        import pymysql

        pymysql.install_as_MySQLdb()
        return {
            "ENGINE": "django.db.backends.mysql",
            "NAME": parts.path.lstrip("/"),
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
            # Django's default, utf8, holds three bytes per character at most; keys and
            # payloads may need four.
            "OPTIONS": {"charset": "utf8mb4"},
        }
    raise ImproperlyConfigured(
        "CARAVEL_DATABASE_URL must be sqlite:///FILE, postgresql://... or mariadb://..."
    )


DATABASES = {"default": database(os.environ.get("CARAVEL_DATABASE_URL", "sqlite:///shop.db"))}

TASKS = {
    "default": {
        "BACKEND": "caravel.contrib.django.CaravelBackend",
        "QUEUES": ["receipts"],
        "OPTIONS": {"MAX_ATTEMPTS": 5},
    }
}

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "caravel.contrib.django",
    "caravel_samples.django.shop",
]

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "the-sample-only-not-for-production")
DEBUG = os.environ.get("DJANGO_DEBUG") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
USE_TZ = True
ROOT_URLCONF = "caravel_samples.django.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
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
]
STATIC_URL = "static/"
TEST_RUNNER = "caravel_samples.django.testrunner.SampleRunner"
