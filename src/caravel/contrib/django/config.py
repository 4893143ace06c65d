"""The backend's ``OPTIONS``, checked once when Django creates the backend, and the queue's
database URL.

=================== =====================================================================
``DATABASE``        the Django database alias the queue shares (default ``"default"``):
                    enqueue runs on that alias's own connection, inside its transaction
``URL``             a separate queue database instead (``postgresql://...``,
                    ``mariadb://...`` or ``sqlite:///...``); an enqueue inside ``atomic()`` on
                    ``DATABASE`` is then sent when that transaction commits
                    (``transaction.on_commit``)
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

__all__ = ["BackendConfig", "django_database_url", "shared_driver_problem"]

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
    """The SQLAlchemy URL of a Django database's settings: PostgreSQL, MariaDB (Django's
    ``mysql`` engine on a MariaDB server) or a SQLite file. A server's URL carries ``NAME``,
    ``USER``, ``PASSWORD``, ``HOST`` and ``PORT``; a ``HOST`` that is a path is the server's
    Unix socket (its folder, on PostgreSQL), as Django reads it."""
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
        return _server_url("postgresql", "host", settings)
    if engine.endswith("mysql"):
        # Caravel's MariaDB store checks the server when it connects: a MySQL server is
        # refused there, naming the version it found.
        return _server_url("mariadb", "unix_socket", settings)
    raise _improperly(
        alias, f"Caravel keeps its queue in PostgreSQL, MariaDB or SQLite, not {engine!r}"
    )


def _server_url(scheme: str, socket_parameter: str, settings: dict[str, Any]) -> str:
    """``scheme://user:password@host:port/name`` from a Django database's settings; a socket
    path in ``HOST`` goes in the query as ``socket_parameter``, where the drivers read it."""
    user, password = settings.get("USER") or "", settings.get("PASSWORD") or ""
    auth = quote(str(user), safe="")
    if password:
        auth += ":" + quote(str(password), safe="")
    host = str(settings.get("HOST") or "")
    port = settings.get("PORT")
    query = ""
    if host.startswith("/"):
        query, host = f"?{socket_parameter}={quote(host)}", ""
    where = f"{host}:{port}" if port else host
    name = quote(str(settings.get("NAME") or ""))
    return f"{scheme}://{auth + '@' if auth else ''}{where}/{name}{query}"


def shared_driver_problem(database: str, vendor: str, driver: str) -> str | None:
    """Why the queue cannot insert on Django's own connection to ``database``, if it cannot.
    ``vendor`` is Django's name for the database, ``driver`` the DB-API module Django's backend
    uses. On MariaDB that must be PyMySQL (Django's ``MySQLdb`` once
    ``pymysql.install_as_MySQLdb()`` ran): Caravel runs its statements on no other MySQL
    driver's connection."""
    if vendor != "mysql" or driver.startswith("pymysql"):
        return None
    return (
        f"the queue shares DATABASES[{database!r}], which Django reaches through {driver} "
        "(mysqlclient), and Caravel inserts on a MariaDB connection of PyMySQL's only: call "
        "pymysql.install_as_MySQLdb() at the top of your settings (the mariadb extra installs "
        "PyMySQL), or give the backend OPTIONS['URL'] (an enqueue inside atomic() is then sent "
        "when the transaction commits)"
    )
