"""The Flask sample's database fixtures, for the tests that run its commands for real."""

from tests.samples.flask.conftest import (
    flask_mariadb_url,
    flask_pg_url,
    flask_sqlite_template,
    settings,
)

__all__ = ["flask_mariadb_url", "flask_pg_url", "flask_sqlite_template", "settings"]
