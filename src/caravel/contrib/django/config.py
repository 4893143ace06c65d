"""The backend's ``OPTIONS``, checked once when Django creates the backend, and the queue's
database URL.

=================== =====================================================================
``DATABASE``        the Django database alias the queue shares (default ``"default"``):
                    enqueue runs on that alias's own connection, inside its transaction
``URL``             a separate queue database instead (``postgresql://...`` or
                    ``sqlite:///...``); an enqueue inside ``atomic()`` on ``DATABASE`` is then
                    sent when that transaction commits (``transaction.on_commit``)
``TASKS``           the dotted paths of the tasks this backend runs; left out, every task in
                    an installed app's ``tasks`` module
``MAX_ATTEMPTS``    the attempt budget of each job (1 to 100, default 3)
``LOG_TRACEBACKS``  development only: ``manage.py caravel_worker`` logs a failed task's
                    traceback (the worker's log only; never the queue's rows or results)
=================== =====================================================================

An unknown key is refused by name, as is a value of the wrong kind.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from caravel.limits import MAX_ATTEMPTS

__all__ = ["BackendConfig", "django_database_url"]

_KEYS = {"DATABASE", "URL", "TASKS", "MAX_ATTEMPTS", "LOG_TRACEBACKS"}


def _improperly(alias: str, message: str) -> Exception:
    from django.core.exceptions import ImproperlyConfigured

    error: Exception = ImproperlyConfigured(f"TASKS[{alias!r}]: {message}")
    return error


@dataclass(frozen=True, slots=True)
class BackendConfig:
    alias: str
    database: str = "default"
    url: str | None = None
    tasks: tuple[str, ...] | None = None
    max_attempts: int = 3
    log_tracebacks: bool = False

    @classmethod
    def from_options(cls, alias: str, options: object) -> BackendConfig:
        if not isinstance(options, dict):
            raise _improperly(alias, "OPTIONS must be a dict")
        unknown = sorted(set(options) - _KEYS)
        if unknown:
            allowed = ", ".join(sorted(_KEYS))
            raise _improperly(alias, f"OPTIONS has unknown key {unknown[0]!r} (known: {allowed})")
        database = options.get("DATABASE", "default")
        if not isinstance(database, str) or not database:
            raise _improperly(alias, "OPTIONS['DATABASE'] must be a database alias")
        url = options.get("URL")
        if url is not None and (not isinstance(url, str) or "://" not in url):
            raise _improperly(alias, "OPTIONS['URL'] must be a database URL")
        tasks = options.get("TASKS")
        if tasks is not None:
            if isinstance(tasks, str) or not all(isinstance(t, str) for t in tasks):
                raise _improperly(alias, "OPTIONS['TASKS'] must be a list of dotted paths")
            tasks = tuple(tasks)
        attempts = options.get("MAX_ATTEMPTS", 3)
        if isinstance(attempts, bool) or not isinstance(attempts, int):
            raise _improperly(alias, f"OPTIONS['MAX_ATTEMPTS'] must be from 1 to {MAX_ATTEMPTS}")
        if not 1 <= attempts <= MAX_ATTEMPTS:
            raise _improperly(alias, f"OPTIONS['MAX_ATTEMPTS'] must be from 1 to {MAX_ATTEMPTS}")
        tracebacks = options.get("LOG_TRACEBACKS", False)
        if not isinstance(tracebacks, bool):
            raise _improperly(alias, "OPTIONS['LOG_TRACEBACKS'] must be True or False")
        return cls(alias, database, url, tasks, attempts, tracebacks)

    @property
    def shares_database(self) -> bool:
        """Whether the queue lives in Django's own ``DATABASE`` (no ``URL`` given)."""
        return self.url is None

    def queue_url(self) -> str:
        """The queue's database URL: ``URL``, or the one of Django's ``DATABASE`` as it is
        configured now (under the test runner, its test database)."""
        if self.url is not None:
            return self.url
        from django.db import connections

        return django_database_url(self.alias, connections[self.database].settings_dict)


def django_database_url(alias: str, settings: dict[str, Any]) -> str:
    """The SQLAlchemy URL of a Django database's settings: PostgreSQL or a SQLite file."""
    engine = str(settings.get("ENGINE", ""))
    name = settings.get("NAME")
    if engine.endswith("sqlite3"):
        text = str(name or "")
        if not text or text == ":memory:" or text.startswith("file:"):
            raise _improperly(
                alias,
                "the queue needs a SQLite file, not an in-memory database (under the test "
                "runner set DATABASES[...]['TEST']['NAME'] to a file)",
            )
        return f"sqlite:///{text}"
    if engine.endswith("postgresql"):
        user, password = settings.get("USER") or "", settings.get("PASSWORD") or ""
        auth = quote(str(user), safe="")
        if password:
            auth += ":" + quote(str(password), safe="")
        host = str(settings.get("HOST") or "")
        port = settings.get("PORT")
        where = f"{host}:{port}" if port else host
        return f"postgresql://{auth + '@' if auth else ''}{where}/{quote(str(name or ''))}"
    raise _improperly(alias, f"Caravel keeps its queue in PostgreSQL or SQLite, not {engine!r}")
