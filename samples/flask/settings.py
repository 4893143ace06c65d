"""The sample's one setting, the database URL, checked once when a command starts.

The queue and the application's table live in the same database, so one URL serves both: the
queue reads it as given (``sqlite:///signups.db``, ``postgresql://...`` or ``mariadb://...``)
and the application opens it with the blocking driver of the same database (pysqlite, psycopg
or PyMySQL).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from caravel import OptionsError

#: The MariaDB URLs taken: the plain ones (Caravel picks its drivers) and PyMySQL's, the
#: blocking driver the application uses.
_MARIADB_SCHEMES = ("mariadb", "mysql", "mariadb+pymysql", "mysql+pymysql")

#: The variable ``caravel worker`` reads for its ``--url`` too, so both processes share it.
URL_VARIABLE = "CARAVEL_DATABASE_URL"

_URL_RULE = (
    "must be a database URL: sqlite:///path/to/file.db, postgresql://user@host/name "
    "or mariadb://user@host/name"
)


@dataclass(frozen=True)
class Settings:
    """``database_url`` is the queue's form of the URL; a SQLite path is made absolute, so
    every thread and process of the application names the same file."""

    database_url: str

    @classmethod
    def from_url(cls, url: str, *, field: str = "--url") -> Settings:
        """Check ``url``, raising :class:`~caravel.OptionsError` that names ``field``."""
        try:
            parsed = make_url(url.strip())
        except ArgumentError:
            raise OptionsError(field, _URL_RULE) from None
        backend = parsed.get_backend_name()
        if backend == "sqlite":
            if parsed.drivername != "sqlite" or parsed.database in (None, "", ":memory:"):
                raise OptionsError(field, _URL_RULE)
            return cls(f"sqlite:///{Path(parsed.database).resolve()}")
        if backend == "postgresql" and parsed.drivername in ("postgresql", "postgresql+psycopg"):
            plain = parsed.set(drivername="postgresql")
            return cls(plain.render_as_string(hide_password=False))
        if backend in ("mariadb", "mysql") and parsed.drivername in _MARIADB_SCHEMES:
            plain = parsed.set(drivername="mariadb")
            return cls(plain.render_as_string(hide_password=False))
        raise OptionsError(field, _URL_RULE)

    @classmethod
    def from_environment(cls) -> Settings:
        """The URL in ``CARAVEL_DATABASE_URL`` (required)."""
        url = os.environ.get(URL_VARIABLE, "")
        if not url.strip():
            raise OptionsError(URL_VARIABLE, "is required: " + _URL_RULE.removeprefix("must be "))
        return cls.from_url(url, field=URL_VARIABLE)

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite:")

    @property
    def is_mariadb(self) -> bool:
        return self.database_url.startswith("mariadb:")

    @property
    def sqlite_path(self) -> Path:
        return Path(self.database_url.removeprefix("sqlite:///"))

    @property
    def app_url(self) -> sa.URL:
        """The same database for the application's blocking SQLAlchemy engine. A SQLite file
        is opened read-write but never created: a missing one is an error, not a new empty
        database."""
        if self.is_sqlite:
            return make_url(f"sqlite+pysqlite:///file:{self.sqlite_path}?mode=rw&uri=true")
        if self.is_mariadb:
            url = make_url(self.database_url).set(drivername="mariadb+pymysql")
            return url.update_query_dict({"charset": "utf8mb4"})
        return make_url(self.database_url).set(drivername="postgresql+psycopg")
