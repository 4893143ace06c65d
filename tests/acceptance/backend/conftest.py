"""The backend sample's fixtures (its settings on a fresh database of each kind, a clean
environment, cheap password hashes) for the tests that serve it for real."""

from tests.samples.backend.conftest import (
    _cheap_password_hashes,
    _no_backend_environment,
    backend_mariadb_url,
    backend_pg_url,
    backend_sqlite_template,
    database,
    settings,
)

__all__ = [
    "_cheap_password_hashes",
    "_no_backend_environment",
    "backend_mariadb_url",
    "backend_pg_url",
    "backend_sqlite_template",
    "database",
    "settings",
]
