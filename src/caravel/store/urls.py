"""Database URLs: what a user writes, and what SQLAlchemy needs for each driver.

Users write ``postgresql://...``, ``mariadb://...`` (or ``mysql://...``, for a MariaDB server)
or ``sqlite:///path/to/queue.db`` (any explicit driver suffix is accepted too), or ``memory://``
/ ``memory://NAME`` for the in-process store (:mod:`caravel.store.memory`), which has no driver
and no migrations. The library talks to PostgreSQL through psycopg 3, to MariaDB through asyncmy
(PyMySQL for migrations), and to SQLite through the standard ``sqlite3`` module (on the store's
own threads, and for migrations) or aiosqlite (the async engine
:func:`caravel.store.sqlite.create_engine` returns).

A PostgreSQL URL may name several servers, as libpq allows:
``postgresql://u@h1:5432,h2:5432/db?target_session_attrs=read-write``. SQLAlchemy cannot parse a
host list with ports in that place, so it is rewritten here into the spelling SQLAlchemy's
psycopg dialect documents, ``postgresql://u@/db?host=h1:5432&host=h2:5432&...``, which users may
write too; the dialect's connections turn either into libpq's host and port lists.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import quote

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from caravel.errors import ValidationError

__all__ = [
    "CARAVEL_OPTIONS",
    "Address",
    "Backend",
    "PostgresOptions",
    "address",
    "async_url",
    "backend_of",
    "hosts_of",
    "postgres_options",
    "sync_url",
]

Backend = Literal["postgresql", "mariadb", "sqlite", "memory"]

#: The SQLAlchemy driver names Caravel uses for each SQL backend: (async, blocking).
_DRIVERS: dict[str, tuple[str, str]] = {
    "postgresql": ("postgresql+psycopg", "postgresql+psycopg"),
    "mariadb": ("mariadb+asyncmy", "mariadb+pymysql"),
    "sqlite": ("sqlite+aiosqlite", "sqlite+pysqlite"),
}


#: A URL's scheme, its user part and its authority's host list (up to the path or query).
_AUTHORITY = re.compile(
    r"^(?P<scheme>[\w+.-]+)://(?P<user>[^@/?#]*@)?(?P<hosts>[^/?#]*)(?P<rest>.*)$"
)


def _parse(url: str | URL) -> URL:
    if isinstance(url, URL):
        return url
    listed = _host_list_as_query(url)
    try:
        return make_url(listed)
    except (ArgumentError, ValueError):
        raise ValidationError("url", "must be a database URL such as sqlite:///queue.db") from None


def _host_list_as_query(url: str) -> str:
    """A PostgreSQL URL whose authority lists several hosts (``h1:p1,h2:p2``), with the hosts
    and ports moved into ``host=h1,h2&port=p1,p2`` query parameters, as SQLAlchemy parses them
    (an IPv6 address loses its brackets there, as libpq takes it); any other URL as it is."""
    found = _AUTHORITY.match(url)
    if found is None or "," not in found["hosts"]:
        return url
    if found["scheme"].split("+")[0] not in ("postgresql", "postgres"):
        return url
    hosts, ports = [], []
    for entry in found["hosts"].split(","):
        bracketed = re.fullmatch(r"\[(?P<host>[^\]]*)\](?::(?P<port>\d*))?", entry)
        if bracketed is not None:
            host, port = bracketed["host"], bracketed["port"] or ""
        else:
            host, _, port = entry.partition(":")
        if not port.isdigit() and port:
            raise ValidationError("url", f"{entry!r} in the host list has a port that is no number")
        hosts.append(quote(host, safe=":"))
        ports.append(port)
    listed = f"host={','.join(hosts)}"
    if any(ports):
        listed += f"&port={','.join(ports)}"
    path, _, query = found["rest"].partition("?")
    joined = "&".join(part for part in (listed, query) if part)
    return f"{found['scheme']}://{found['user'] or ''}{path or '/'}?{joined}"


def hosts_of(url: str | URL) -> tuple[str, ...]:
    """The servers a URL names, each as ``host`` or ``host:port`` (``[v6]:port``), in order:
    one for a plain URL (none when it names no host), several for a PostgreSQL multi-host URL,
    in either spelling (``host=h1:p1&host=h2:p2``, or ``host=h1,h2&port=p1,p2``)."""
    return tuple(
        (f"[{name}]:{port}" if ":" in name else f"{name}:{port}") if port else name
        for name, port in _servers(_parse(url))
    )


def _servers(parsed: URL) -> list[tuple[str, str]]:
    """(host, port or "") of each server ``parsed`` names."""
    listed = parsed.query.get("host")
    if listed is None:
        if parsed.host is None:
            return []
        return [(parsed.host, "" if parsed.port is None else str(parsed.port))]
    if isinstance(listed, tuple):  # host=h1:p1&host=h2:p2
        return [(entry.partition(":")[0], entry.partition(":")[2]) for entry in listed]
    names = listed.split(",")
    given = parsed.query.get("port")
    if isinstance(given, tuple):
        given = ",".join(given)
    ports = [] if given is None else given.split(",")
    if len(ports) == 1 and len(names) > 1:
        ports = ports * len(names)  # libpq: one port for every host
    ports += [""] * (len(names) - len(ports))
    return list(zip(names, ports, strict=False))


def backend_of(url: str | URL) -> Backend:
    """Which database a URL names; anything but PostgreSQL, MariaDB (``mariadb://`` or
    ``mysql://``), SQLite and the in-memory store is rejected, and so is a SQLite URL with a
    host (``sqlite://queue.db``: one slash too few)."""
    parsed = _parse(url)
    name = parsed.get_backend_name()
    if name in ("postgresql", "postgres"):
        return "postgresql"
    if name in ("mariadb", "mysql"):
        return "mariadb"
    if name == "sqlite":
        if parsed.host:
            raise ValidationError(
                "url",
                "a SQLite URL takes three slashes before a relative path (sqlite:///queue.db) "
                "and four before an absolute one (sqlite:////var/lib/queue.db)",
            )
        return "sqlite"
    if name == "memory":
        return "memory"
    raise ValidationError(
        "url", "must name a postgresql://, mariadb://, sqlite:// or memory:// database"
    )


def _sql_backend(parsed: URL) -> Backend:
    """The SQL database a URL names: the in-memory store has no driver to name, and its schema
    is always current, so asking for one (to migrate it, say) is a usage error."""
    backend = backend_of(parsed)
    if backend == "memory":
        raise ValidationError(
            "url",
            "a memory:// store lives inside one process and needs no migrations; "
            "use a postgresql://, mariadb:// or sqlite:// database here",
        )
    return backend


def async_url(url: str | URL) -> URL:
    """The URL with the async driver Caravel uses for its backend, less Caravel's own options."""
    parsed = _parse(url)
    return parsed.set(drivername=_DRIVERS[_sql_backend(parsed)][0]).difference_update_query(
        CARAVEL_OPTIONS
    )


def sync_url(url: str | URL) -> URL:
    """The URL with the synchronous driver (used by migrations), less Caravel's own options."""
    parsed = _parse(url)
    return parsed.set(drivername=_DRIVERS[_sql_backend(parsed)][1]).difference_update_query(
        CARAVEL_OPTIONS
    )


#: Query options of a PostgreSQL URL that Caravel reads itself; libpq never sees them.
CARAVEL_OPTIONS = ("pool_mode", "wakeups", "notify_window_ms")


@dataclass(frozen=True, slots=True)
class PostgresOptions:
    """What a PostgreSQL URL's own query options ask of the store.

    * ``pool_mode=transaction``: the URL reaches the server through a pooler that hands each
      transaction to any server connection (PgBouncer's transaction pooling). Nothing may
      outlive a transaction: no prepared statements, no session settings, no LISTEN. Implies
      ``wakeups=off``.
    * ``wakeups=off``: enqueues send no NOTIFY and the store offers no LISTEN feed; workers
      poll.
    * ``notify_window_ms``: the per-process window in which at most one enqueue per queue
      carries a NOTIFY (0 to 1000; 0 sends one with every enqueue transaction).
    """

    transaction_pooling: bool = False
    wakeups: bool = True
    notify_window: float | None = None


def _one(parsed: URL, name: str) -> str | None:
    value = parsed.query.get(name)
    if isinstance(value, tuple):
        raise ValidationError(name, "is given more than once in the URL")
    return value


def postgres_options(url: str | URL) -> PostgresOptions:
    """The options ``url`` gives in its query (see :class:`PostgresOptions`); a
    :class:`~caravel.errors.ValidationError` naming the option for a value it cannot take."""
    parsed = _parse(url)
    mode = _one(parsed, "pool_mode")
    if mode not in (None, "session", "transaction"):
        raise ValidationError("pool_mode", "must be session or transaction")
    wakeups = _one(parsed, "wakeups")
    if wakeups not in (None, "on", "off"):
        raise ValidationError("wakeups", "must be on or off")
    window_ms = _one(parsed, "notify_window_ms")
    window: float | None = None
    if window_ms is not None:
        if not window_ms.isdigit() or int(window_ms) > 1000:
            raise ValidationError("notify_window_ms", "must be a whole number from 0 to 1000")
        window = int(window_ms) / 1000
    pooled = mode == "transaction"
    if pooled and wakeups == "on":
        raise ValidationError("wakeups", "cannot be on with pool_mode=transaction (no LISTEN)")
    return PostgresOptions(
        transaction_pooling=pooled, wakeups=not pooled and wakeups != "off", notify_window=window
    )


@dataclass(frozen=True, slots=True)
class Address:
    """Where a database URL points, for messages: never its password."""

    backend: Backend
    shown: str
    """The URL with its password as ``***`` and its query left out (it may carry secrets); a
    multi-host URL's servers shown as libpq's list (``h1:p1,h2:p2``)."""
    host: str | None
    """The server's host; a multi-host URL's hosts, comma-separated, as libpq takes them."""
    port: int | None
    username: str | None
    database: str | None
    """PostgreSQL and MariaDB: the database's name; SQLite: the file's absolute path (``None``
    in memory)."""


def address(url: str | URL) -> Address:
    """What messages may say of ``url``; a :class:`~caravel.errors.ValidationError` for a URL
    that is none of Caravel's."""
    parsed = _parse(url)
    backend = backend_of(parsed)
    database = parsed.database
    if backend == "sqlite" and database not in (None, "", ":memory:"):
        database = str(Path(database or "").absolute())
    host, port = parsed.host, parsed.port
    shown = parsed.set(query={}).render_as_string(hide_password=True)
    if "host" in parsed.query:
        # Shown as libpq's authority list (h1:p1,h2:p2), which the query form means.
        host = ",".join(name for name, _ in _servers(parsed))
        marker = "caravel-hosts"
        shown = parsed.set(query={}, host=marker, port=None).render_as_string(hide_password=True)
        shown = shown.replace(marker, ",".join(hosts_of(parsed)), 1)
    return Address(
        backend=backend,
        shown=shown,
        host=host or None,
        port=port,
        username=parsed.username,
        database=database or None,
    )
