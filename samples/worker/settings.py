"""The sample's settings, read once from the environment.

``CARAVEL_WORKER_DATABASE_PROVIDER`` picks where the queue and the results live: ``sqlite``
(the default) keeps them in two files, ``queue.db`` and ``results.db``, in the folder named by
``CARAVEL_WORKER_DIRECTORY`` (then required); ``postgres`` and ``mariadb`` keep both in the one
database named by ``CARAVEL_WORKER_DATABASE_URL`` (then required: a ``postgresql://`` or a
``mariadb://`` URL, as the provider says), the results table beside the queue's tables, each
with its own migrations.

The others exist only for the smoke test: ``CARAVEL_WORKER_CRASH_AFTER_RESULT=1`` makes the
process exit with code 73 right after it saves a result and before it acknowledges the job,
``CARAVEL_WORKER_LEASE_SECONDS`` shortens the lease (60 seconds by default), and
``CARAVEL_WORKER_HANDLER_DELAY_MS`` makes each job pause before saving its result, so a signal
can arrive mid-job (0 by default).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from caravel import OptionsError

CRASH_EXIT_CODE = 73

Provider = Literal["sqlite", "postgres", "mariadb"]
PROVIDERS: tuple[Provider, ...] = get_args(Provider)

#: The URL schemes each server provider takes (any driver suffix too), and the form the queue
#: is given (no driver: Caravel picks its own).
_SCHEMES = {"postgres": ("postgresql", "postgres"), "mariadb": ("mariadb", "mysql")}
_PLAIN = {"postgres": "postgresql", "mariadb": "mariadb"}
#: The drivers the results engine uses: (async, blocking for Alembic), as the queue's.
_DRIVERS = {
    "postgres": ("postgresql+psycopg", "postgresql+psycopg"),
    "mariadb": ("mariadb+asyncmy", "mariadb+pymysql"),
}


@dataclass(frozen=True)
class Settings:
    directory: Path | None
    lease_seconds: int
    crash_after_result: bool
    handler_delay_ms: int = 0
    provider: Provider = "sqlite"
    #: With a server provider: the one database holding the queue and the results.
    database_url: str | None = None

    @property
    def queue_url(self) -> str:
        if self.provider == "sqlite":
            return f"sqlite:///{self._folder / 'queue.db'}"
        return self._server_url

    @property
    def results_path(self) -> Path:
        """SQLite only: the results file."""
        return self._folder / "results.db"

    def results_url(self, *, blocking: bool = False) -> sa.URL:
        """The results database for SQLAlchemy: asynchronous for the sample, ``blocking`` for
        Alembic. SQLite's file is opened read-write but never created (``mode=rw``): a missing
        one is an error, not a new empty database."""
        if self.provider == "sqlite":
            if blocking:
                return sa.URL.create("sqlite+pysqlite", database=str(self.results_path))
            return make_url(f"sqlite+aiosqlite:///file:{self.results_path}?mode=rw&uri=true")
        url = make_url(self._server_url).set(drivername=_DRIVERS[self.provider][int(blocking)])
        return url.set(query={"charset": "utf8mb4"}) if self.provider == "mariadb" else url

    @property
    def names(self) -> tuple[str, str]:
        """What messages call the queue's and the results' databases."""
        return ("queue.db", "results.db") if self.provider == "sqlite" else ("queue", "results")

    @property
    def _folder(self) -> Path:
        assert self.directory is not None, "the sqlite provider has a folder"
        return self.directory

    @property
    def _server_url(self) -> str:
        assert self.database_url is not None, "a server provider has a URL"
        return self.database_url

    @classmethod
    def from_environment(cls) -> Settings:
        provider = os.environ.get("CARAVEL_WORKER_DATABASE_PROVIDER", "").strip() or "sqlite"
        if provider not in PROVIDERS:
            raise OptionsError(
                "CARAVEL_WORKER_DATABASE_PROVIDER", "must be sqlite, postgres or mariadb"
            )
        directory, database_url = None, None
        if provider == "sqlite":
            directory = _folder()
        else:
            database_url = _server_url(provider)
        raw = os.environ.get("CARAVEL_WORKER_LEASE_SECONDS", "60")
        try:
            lease = int(raw)
        except ValueError:
            raise OptionsError("CARAVEL_WORKER_LEASE_SECONDS", "must be whole seconds") from None
        if not (1 <= lease <= 3600):
            raise OptionsError("CARAVEL_WORKER_LEASE_SECONDS", "must be from 1 to 3600")
        crash = os.environ.get("CARAVEL_WORKER_CRASH_AFTER_RESULT", "") == "1"
        try:
            delay = int(os.environ.get("CARAVEL_WORKER_HANDLER_DELAY_MS", "0"))
        except ValueError:
            raise OptionsError("CARAVEL_WORKER_HANDLER_DELAY_MS", "must be milliseconds") from None
        if not (0 <= delay <= 600_000):
            raise OptionsError("CARAVEL_WORKER_HANDLER_DELAY_MS", "must be from 0 to 600000")
        return cls(
            directory=directory,
            lease_seconds=lease,
            crash_after_result=crash,
            handler_delay_ms=delay,
            provider=provider,
            database_url=database_url,
        )


def _folder() -> Path:
    folder = os.environ.get("CARAVEL_WORKER_DIRECTORY", "").strip()
    if not folder or not Path(folder).is_dir():
        raise OptionsError("CARAVEL_WORKER_DIRECTORY", "must name an existing folder")
    return Path(folder)


def _server_url(provider: Provider) -> str:
    """``CARAVEL_WORKER_DATABASE_URL`` in the queue's form, checked against ``provider``; the
    value itself is never repeated (it may hold a password)."""
    name = "CARAVEL_WORKER_DATABASE_URL"
    scheme = _PLAIN[provider]
    rule = f"must be a {scheme}:// URL with CARAVEL_WORKER_DATABASE_PROVIDER={provider}"
    value = os.environ.get(name, "").strip()
    if not value:
        raise OptionsError(name, f"is required: {rule.removeprefix('must be ')}")
    try:
        url = make_url(value)
    except ArgumentError:
        raise OptionsError(name, rule) from None
    if url.get_backend_name() not in _SCHEMES[provider] or not url.database:
        raise OptionsError(name, rule + ", naming its database")
    return url.set(drivername=scheme).render_as_string(hide_password=False)
