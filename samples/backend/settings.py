"""The backend's settings, read once from the environment with pydantic-settings.

Every name starts with ``CARAVEL__`` and nested groups are separated by ``__``, for example
``CARAVEL__LIMITS__CONCURRENCY=64``. :func:`load_settings` turns any invalid value into one
:class:`SettingsError` whose message names each bad setting and its allowed range, so the
application refuses to start instead of running with a surprise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

PREFIX = "CARAVEL__"

#: What each setting must be, by its dotted field path. Shown when a value is rejected.
RULES: dict[str, str] = {
    "identity_database": "is required: a SQLite file path, a PostgreSQL URL when "
    "CARAVEL__DATABASE_PROVIDER=postgres, or a MariaDB URL when CARAVEL__DATABASE_PROVIDER=mariadb",
    "database_provider": "must be sqlite, postgres or mariadb",
    "run_worker": "must be true or false",
    "allow_registration": "must be true or false",
    "secure_cookies": "must be true or false",
    "api_docs": "must be true or false",
    "session_hours": "must be an integer from 1 to 720",
    "limits.concurrency": "must be an integer from 1 to 1024",
    "limits.login_permit_limit": "must be an integer from 1 to 1000",
    "limits.login_window_seconds": "must be an integer from 1 to 3600",
    "limits.body_timeout_seconds": "must be a number of seconds above 0 and at most 300",
    "limits.body_min_bytes_per_second": "must be an integer from 1 to 1048576",
    "limits.body_grace_seconds": "must be a number of seconds from 0 to 60",
    "worker.concurrency": "must be an integer from 1 to 1024",
    "worker.lease_seconds": "must be an integer from 1 to 3600",
}


class SettingsError(ValueError):
    """One or more settings are invalid; the message names each and its allowed values."""


def env_name(path: str) -> str:
    """``limits.concurrency`` -> ``CARAVEL__LIMITS__CONCURRENCY``."""
    return PREFIX + "__".join(part.upper() for part in path.split("."))


class Limits(BaseModel):
    """Per-instance request limits (``CARAVEL__LIMITS__...``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    concurrency: int = Field(32, ge=1, le=1024)
    login_permit_limit: int = Field(10, ge=1, le=1000)
    login_window_seconds: int = Field(60, ge=1, le=3600)
    #: A request body must arrive whole within this long (else 408)...
    body_timeout_seconds: float = Field(10.0, gt=0, le=300)
    #: ...and, after its grace period, at least this fast on average.
    body_min_bytes_per_second: int = Field(1024, ge=1, le=1024 * 1024)
    #: How long a body's first bytes may lag its headers before the minimum rate applies.
    body_grace_seconds: float = Field(5.0, ge=0, le=60)


class WorkerSettings(BaseModel):
    """The in-process worker (``CARAVEL__WORKER__...``), used when ``RUN_WORKER`` is true."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    concurrency: int = Field(4, ge=1, le=1024)
    lease_seconds: int = Field(60, ge=1, le=3600)


class Settings(BaseSettings):
    """Everything the backend reads from its environment.

    Attributes:
        identity_database: with the ``sqlite`` provider, the path of the SQLite file; with
            ``postgres``, a ``postgresql://`` connection URL; with ``mariadb``, a
            ``mariadb://`` (or ``mysql://``) one. Accounts, sessions, notes, results and the
            queue all live there.
        database_provider: ``sqlite`` (default), ``postgres`` or ``mariadb``.
        run_worker: start a queue worker inside the web process (off by default).
        allow_registration: enable ``POST /auth/register`` (off by default).
        secure_cookies: mark the session cookie ``Secure`` and name it with the ``__Host-``
            prefix (on by default; browsers and curl still send it to ``http://localhost``).
        api_docs: serve the interactive API pages ``/docs`` and ``/redoc`` (off by default:
            they load scripts from a CDN into the API's origin; for development only).
            ``/openapi.json`` is always served.
        session_hours: how long a session lasts after sign-in (1 to 720, default 8).
    """

    model_config = SettingsConfigDict(
        env_prefix=PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
    )

    identity_database: str
    database_provider: Literal["sqlite", "postgres", "mariadb"] = "sqlite"
    run_worker: bool = False
    allow_registration: bool = False
    secure_cookies: bool = True
    api_docs: bool = False
    session_hours: int = Field(8, ge=1, le=720)
    limits: Limits = Limits()
    worker: WorkerSettings = WorkerSettings()

    @model_validator(mode="after")
    def _database_matches_provider(self) -> Settings:
        value = self.identity_database.strip()
        name = env_name("identity_database")
        if self.database_provider == "sqlite":
            if not value or "://" in value or value == ":memory:":
                raise ValueError(
                    f"{name}: with the sqlite provider it must be a file path, not a URL"
                )
            return self
        try:
            backend = make_url(value).get_backend_name()
        except ArgumentError:
            backend = ""
        if self.database_provider == "postgres" and backend not in ("postgresql", "postgres"):
            raise ValueError(f"{name}: with the postgres provider it must be a postgresql:// URL")
        if self.database_provider == "mariadb" and backend not in ("mariadb", "mysql"):
            raise ValueError(f"{name}: with the mariadb provider it must be a mariadb:// URL")
        return self

    @property
    def session_cookie(self) -> str:
        """The session cookie's name: with ``Secure`` cookies the ``__Host-`` prefix makes
        browsers refuse one set by another host or path, or over plain HTTP from afar."""
        return "__Host-caravel_session" if self.secure_cookies else "caravel_session"

    @property
    def database_url(self) -> str:
        """The database URL the queue and the migrations use (``sqlite:///``, PostgreSQL's or
        MariaDB's, without a driver: Caravel picks its own)."""
        if self.database_provider == "sqlite":
            return f"sqlite:///{Path(self.identity_database.strip()).resolve()}"
        url = make_url(self.identity_database.strip())
        plain = "postgresql" if self.database_provider == "postgres" else "mariadb"
        return url.set(drivername=plain).render_as_string(hide_password=False)


def _describe(error: Any) -> str:
    loc = ".".join(str(part) for part in error.get("loc", ()))
    if not loc:
        # A model-level rule: its message already names the setting.
        return str(error.get("msg", "")).removeprefix("Value error, ")
    if error.get("type") == "extra_forbidden":
        return f"{env_name(loc)}: is not a known setting"
    return f"{env_name(loc)}: {RULES.get(loc, 'is invalid')}"


def load_settings(**overrides: Any) -> Settings:
    """Read the environment (``overrides`` win), raising :class:`SettingsError` naming every
    invalid setting and its allowed range. The rejected values are never repeated: a URL may
    carry a password."""
    try:
        return Settings(**overrides)
    except pydantic.ValidationError as exc:
        problems = sorted({_describe(error) for error in exc.errors()})
        raise SettingsError("invalid settings: " + "; ".join(problems)) from None
