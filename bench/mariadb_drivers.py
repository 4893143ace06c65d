"""Which driver Caravel should talk to MariaDB through: the same work done by each one that is
installed, through SQLAlchemy 2 where it has a dialect and through the bare driver.

Three figures per driver, each the median of ``--rounds`` rounds, the drivers taking turns
within every round (so a machine whose speed drifts affects all alike), every driver over one
connection opened and warmed up beforehand:

- ``commits_per_s``: one-row INSERT then COMMIT, one client, on an InnoDB table; durable as the
  server is configured (``innodb_flush_log_at_trx_commit``, printed beside the table: 1 flushes
  the redo log at every commit).
- ``cpu_us_per_commit``: this process's CPU (``time.process_time``) per insert and commit, over
  the same loop: what the producer pays, the server's share apart.
- ``select_ms``: a SELECT of 1,000 rows of 10 columns of mixed types (integers, strings, a
  double, a DATETIME(3), a JSON text) fetched whole.

The async drivers run on asyncio's own event loop. ``--errors`` also provokes, on each async
driver, a duplicate key, a lock-wait timeout, a deadlock, a connection killed by the server and a
connection refused, and prints the exception class and ``args[0]`` each raises.

A driver that does not import is listed as skipped, with how to install it: mysqlclient and
MariaDB's own connector have wheels on PyPI for Windows only and elsewhere build against
MariaDB Connector/C's headers (Debian's ``libmariadb-dev``). The runs behind the choice of
asyncmy are ``bench/results/reference-2026-12-06-mariadb-drivers-*.json``.

Run it with ``python -m bench.mariadb_drivers`` (``--url`` names the server, by default
``CARAVEL_BENCH_MARIADB_URL`` or the local one; ``--json PATH`` writes the figures). A throwaway
database is created for the run and dropped afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import importlib
import json
import os
import platform
import secrets
import socket
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import create_async_engine

ADMIN_URL = os.environ.get("CARAVEL_BENCH_MARIADB_URL", "mariadb://root@127.0.0.1:3306/test")
SELECT_ROWS = 1000

_META = sa.MetaData()
PROBE = sa.Table(
    "probe",
    _META,
    sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
    sa.Column("n", sa.Integer, nullable=False),
    sa.Column("s", sa.String(64), nullable=False),
)
# Text, not JSON, for the payload: the figure is the driver's decoding, not SQLAlchemy's json.loads.
WIDE = sa.Table(
    "wide",
    _META,
    sa.Column("id", sa.BigInteger, primary_key=True),
    sa.Column("job_id", sa.String(36)),
    sa.Column("queue", sa.String(64)),
    sa.Column("job_type", sa.String(128)),
    sa.Column("state", sa.String(16)),
    sa.Column("attempt", sa.Integer),
    sa.Column("max_attempts", sa.Integer),
    sa.Column("payload", sa.Text),
    sa.Column("available_at", sa.Float),
    sa.Column("created_at", sa.DateTime),
)
_DDL = (
    "CREATE TABLE probe (id BIGINT AUTO_INCREMENT PRIMARY KEY, n INT NOT NULL,"
    " s VARCHAR(64) NOT NULL) ENGINE=InnoDB",
    "CREATE TABLE wide (id BIGINT PRIMARY KEY, job_id CHAR(36), queue VARCHAR(64),"
    " job_type VARCHAR(128), state VARCHAR(16), attempt INT, max_attempts INT, payload JSON,"
    " available_at DOUBLE, created_at DATETIME(3)) ENGINE=InnoDB",
)
_INSERT = "INSERT INTO probe (n, s) VALUES (%s, %s)"
_SELECT = "SELECT * FROM wide ORDER BY id"


# ----- the server and the throwaway database --------------------------------------------------


def _connect_args(url: URL) -> dict[str, Any]:
    return {
        "host": url.host or "127.0.0.1",
        "port": url.port or 3306,
        "user": url.username or "root",
        "password": url.password or "",
    }


def _admin(url: URL) -> Any:
    import pymysql

    return pymysql.connect(**_connect_args(url), autocommit=True, connect_timeout=5)


def server_facts(url: URL) -> dict[str, Any]:
    """What decides how durable, and so how slow, a commit is on this server."""
    names = (
        "version",
        "innodb_flush_log_at_trx_commit",
        "innodb_flush_method",
        "innodb_doublewrite",
        "log_bin",
        "sync_binlog",
    )
    with contextlib.closing(_admin(url)) as conn, conn.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(f"@@{name}" for name in names))
        row = cursor.fetchone()
    return dict(zip(names, row, strict=True))


@contextmanager
def bench_database(admin_url: str) -> Iterator[URL]:
    """A new database holding the two tables (``wide`` filled), dropped afterwards."""
    admin = make_url(admin_url)
    name = f"caravel_bench_drivers_{os.getpid()}_{secrets.token_hex(4)}"
    with contextlib.closing(_admin(admin)) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin")
    url = admin.set(database=name)
    try:
        with contextlib.closing(_admin(url)) as conn, conn.cursor() as cursor:
            cursor.execute(f"USE `{name}`")
            for statement in _DDL:
                cursor.execute(statement)
            created = datetime.datetime(2026, 12, 1, 12, 0, 0, 123000)
            cursor.executemany(
                "INSERT INTO wide VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                [
                    (
                        i,
                        f"0193a5b2-7c1d-7e4f-9a6b-{i:012d}",
                        "default",
                        "bench.noop.v1",
                        "ready",
                        0,
                        3,
                        json.dumps({"n": i, "text": "x" * 60}),
                        1_764_590_400.123 + i,
                        created,
                    )
                    for i in range(SELECT_ROWS)
                ],
            )
        yield url
    finally:
        with contextlib.closing(_admin(admin)) as conn, conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")


# ----- the drivers --------------------------------------------------------------------------


@dataclass
class Variant:
    """One way of reaching the server: a driver, bare or through SQLAlchemy."""

    name: str
    module: str  # what must import for it to run
    is_async: bool
    via_sqlalchemy: bool
    drivername: str = ""  # SQLAlchemy's, when via_sqlalchemy
    conn: Any = field(default=None, repr=False)
    engine: Any = field(default=None, repr=False)

    def available(self) -> str | None:
        """Why it cannot run here (``None`` when it can)."""
        try:
            importlib.import_module(self.module)
        except ImportError as exc:
            return f"{self.module} does not import ({exc}); {_INSTALL[self.module]}"
        return None


#: How to get each driver: the two of C build from source and need MariaDB Connector/C's headers.
_INSTALL = {
    "asyncmy": "pip install asyncmy (in caravel-queue[mariadb])",
    "aiomysql": "pip install aiomysql (in caravel-queue[bench])",
    "pymysql": "pip install pymysql (in caravel-queue[mariadb])",
    "mariadb": "pip install mariadb, after apt-get install libmariadb-dev",
    "MySQLdb": "pip install mysqlclient, after apt-get install libmariadb-dev",
}


VARIANTS = (
    Variant("asyncmy (SQLAlchemy)", "asyncmy", True, True, "mariadb+asyncmy"),
    Variant("asyncmy (bare)", "asyncmy", True, False),
    Variant("aiomysql (SQLAlchemy)", "aiomysql", True, True, "mariadb+aiomysql"),
    Variant("aiomysql (bare)", "aiomysql", True, False),
    Variant("pymysql (SQLAlchemy)", "pymysql", False, True, "mariadb+pymysql"),
    Variant("pymysql (bare)", "pymysql", False, False),
    Variant("mariadb connector (SQLAlchemy)", "mariadb", False, True, "mariadb+mariadbconnector"),
    Variant("mariadb connector (bare)", "mariadb", False, False),
    # MySQLdb is mysqlclient; mariadb+mysqldb is SQLAlchemy's mysql+mysqldb with MariaDB's dialect.
    Variant("mysqlclient (SQLAlchemy)", "MySQLdb", False, True, "mariadb+mysqldb"),
    Variant("mysqlclient (bare)", "MySQLdb", False, False),
)


async def _bare_async_connect(module: str, url: URL) -> Any:
    args = _connect_args(url)
    if module == "asyncmy":
        import asyncmy

        return await asyncmy.connect(**args, database=url.database, autocommit=False)
    import aiomysql

    return await aiomysql.connect(**args, db=url.database, autocommit=False)


def _bare_sync_connect(module: str, url: URL) -> Any:
    args = _connect_args(url)
    if module == "pymysql":
        import pymysql

        return pymysql.connect(**args, database=url.database, autocommit=False)
    if module == "mariadb":
        import mariadb

        return mariadb.connect(**args, database=url.database, autocommit=False)
    import MySQLdb

    return MySQLdb.connect(
        host=args["host"],
        port=args["port"],
        user=args["user"],
        passwd=args["password"],
        db=url.database,
        autocommit=False,
    )


def _bare_sql(variant: Variant, sql: str) -> str:
    # MariaDB's own connector takes qmark placeholders; the others take format ones.
    return sql.replace("%s", "?") if variant.module == "mariadb" else sql


async def _open(variant: Variant, url: URL) -> None:
    if variant.via_sqlalchemy:
        target = url.set(drivername=variant.drivername)
        if variant.is_async:
            variant.engine = create_async_engine(target, poolclass=sa.pool.NullPool)
            variant.conn = await variant.engine.connect()
        else:
            variant.engine = sa.create_engine(target, poolclass=sa.pool.NullPool)
            variant.conn = variant.engine.connect()
    elif variant.is_async:
        variant.conn = await _bare_async_connect(variant.module, url)
    else:
        variant.conn = _bare_sync_connect(variant.module, url)


async def _close(variant: Variant) -> None:
    if variant.via_sqlalchemy:
        if variant.is_async:
            await variant.conn.close()
            await variant.engine.dispose()
        else:
            variant.conn.close()
            variant.engine.dispose()
    elif variant.is_async:
        await variant.conn.ensure_closed()
    else:
        variant.conn.close()


async def _insert_commits(variant: Variant, n: int) -> None:
    """``n`` times: insert one row, commit. Each is a transaction of its own (autocommit is
    off, so the INSERT opens one and the COMMIT ends it: two round trips, one log flush)."""
    conn = variant.conn
    if variant.via_sqlalchemy:
        statement = PROBE.insert()
        if variant.is_async:
            for i in range(n):
                await conn.execute(statement, {"n": i, "s": "probe"})
                await conn.commit()
        else:
            for i in range(n):
                conn.execute(statement, {"n": i, "s": "probe"})
                conn.commit()
        return
    sql = _bare_sql(variant, _INSERT)
    if variant.is_async:
        async with conn.cursor() as cursor:
            for i in range(n):
                await cursor.execute(sql, (i, "probe"))
                await conn.commit()
        return
    cursor = conn.cursor()
    for i in range(n):
        cursor.execute(sql, (i, "probe"))
        conn.commit()
    cursor.close()


async def _selects(variant: Variant, n: int) -> None:
    """``n`` times: SELECT the 1,000 rows and fetch them all (then end the read's
    transaction, as a caller would)."""
    conn = variant.conn
    if variant.via_sqlalchemy:
        statement = sa.select(WIDE).order_by(WIDE.c.id)
        for _ in range(n):
            if variant.is_async:
                rows = (await conn.execute(statement)).all()
                await conn.rollback()
            else:
                rows = conn.execute(statement).all()
                conn.rollback()
            assert len(rows) == SELECT_ROWS
        return
    if variant.is_async:
        async with conn.cursor() as cursor:
            for _ in range(n):
                await cursor.execute(_SELECT)
                rows = await cursor.fetchall()
                await conn.rollback()
                assert len(rows) == SELECT_ROWS
        return
    cursor = conn.cursor()
    for _ in range(n):
        cursor.execute(_SELECT)
        rows = cursor.fetchall()
        conn.rollback()
        assert len(rows) == SELECT_ROWS
    cursor.close()


def _timed(runner: asyncio.Runner, body: Callable[[], Any]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of ``body`` (a coroutine function, run to its end)."""
    wall, cpu = time.perf_counter(), time.process_time()
    runner.run(body())
    return time.perf_counter() - wall, time.process_time() - cpu


def measure(
    url: URL, variants: list[Variant], commits: int, selects: int, rounds: int
) -> dict[str, dict[str, Any]]:
    """Per variant, the medians over ``rounds`` (see the module's docstring)."""
    figures: dict[str, dict[str, list[float]]] = {
        v.name: {"commits_per_s": [], "cpu_us_per_commit": [], "select_ms": []} for v in variants
    }
    with asyncio.Runner() as runner:
        for variant in variants:
            runner.run(_open(variant, url))
            # Warm-up: the connection's first statements, SQLAlchemy's compiled caches.
            runner.run(_insert_commits(variant, 20))
            runner.run(_selects(variant, 2))
        try:
            for _ in range(rounds):
                for variant in variants:
                    wall, cpu = _timed(runner, lambda v=variant: _insert_commits(v, commits))
                    figures[variant.name]["commits_per_s"].append(commits / wall)
                    figures[variant.name]["cpu_us_per_commit"].append(cpu / commits * 1e6)
                    wall, _ = _timed(runner, lambda v=variant: _selects(v, selects))
                    figures[variant.name]["select_ms"].append(wall / selects * 1e3)
        finally:
            for variant in variants:
                runner.run(_close(variant))
    return {
        name: {key: round(statistics.median(values), 1) for key, values in found.items()}
        for name, found in figures.items()
    }


# ----- the errors the async drivers raise ---------------------------------------------------


def _described(exc: BaseException) -> dict[str, Any]:
    """The class raised and its ``args[0]``; through SQLAlchemy, also the driver's exception
    it wraps (``.orig``) and whether SQLAlchemy took it for a lost connection."""
    found: dict[str, Any] = {"class": f"{type(exc).__module__}.{type(exc).__qualname__}"}
    if isinstance(exc, sa.exc.DBAPIError):
        found["invalidated"] = exc.connection_invalidated
        orig = exc.orig
        if orig is not None:
            found["driver_class"] = f"{type(orig).__module__}.{type(orig).__qualname__}"
            exc = orig
    found["code"] = exc.args[0] if exc.args else None
    found["message"] = str(exc.args[1] if len(exc.args) > 1 else exc).splitlines()[0][:100]
    return found


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class _Session:
    """One connection of an async driver, bare or through SQLAlchemy, with just what the
    provocations need."""

    def __init__(self, module: str, via_sqlalchemy: bool, url: URL) -> None:
        self.module, self.via_sqlalchemy, self.url = module, via_sqlalchemy, url
        self.conn: Any = None
        self.engine: Any = None

    async def connect(self) -> _Session:
        if self.via_sqlalchemy:
            driver = f"mariadb+{self.module}"
            self.engine = create_async_engine(
                self.url.set(drivername=driver), poolclass=sa.pool.NullPool
            )
            self.conn = await self.engine.connect()
        else:
            self.conn = await _bare_async_connect(self.module, self.url)
        return self

    async def run(self, sql: str) -> Any:
        """Execute ``sql``; its first row's first value when it returns rows."""
        if self.via_sqlalchemy:
            result = await self.conn.exec_driver_sql(sql)
            return result.first()[0] if result.returns_rows else None
        async with self.conn.cursor() as cursor:
            await cursor.execute(sql)
            row = await cursor.fetchone()
            return row[0] if row else None

    async def commit(self) -> None:
        await self.conn.commit()

    async def rollback(self) -> None:
        await self.conn.rollback()

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            if self.via_sqlalchemy:
                await self.conn.close()
            else:
                self.conn.close()
        if self.engine is not None:
            await self.engine.dispose()


async def _errors_of(module: str, via_sqlalchemy: bool, url: URL) -> dict[str, Any]:
    """Provoke each error on fresh connections; what each raised."""
    found: dict[str, Any] = {}

    async def caught(what: str, body: Any) -> None:
        try:
            await body
        except Exception as exc:
            found[what] = _described(exc)
        else:
            found[what] = {"class": None, "code": None, "message": "nothing was raised"}

    a = await _Session(module, via_sqlalchemy, url).connect()
    b = await _Session(module, via_sqlalchemy, url).connect()
    try:
        await a.run("DELETE FROM probe")
        await a.run("INSERT INTO probe (id, n, s) VALUES (1, 1, 'a'), (2, 2, 'b')")
        await a.commit()

        await caught("duplicate key (1062)", a.run("INSERT INTO probe VALUES (1, 1, 'a')"))
        await a.rollback()

        await a.run("SELECT id FROM probe WHERE id = 1 FOR UPDATE")
        await b.run("SET SESSION innodb_lock_wait_timeout = 1")
        await caught("lock wait timeout (1205)", b.run("UPDATE probe SET n = 3 WHERE id = 1"))
        await a.rollback()
        await b.rollback()

        # Each holds one row and asks for the other's: InnoDB picks one as the victim.
        await b.run("SET SESSION innodb_lock_wait_timeout = 10")
        await a.run("UPDATE probe SET n = 4 WHERE id = 1")
        await b.run("UPDATE probe SET n = 4 WHERE id = 2")
        waiting = asyncio.ensure_future(a.run("UPDATE probe SET n = 5 WHERE id = 2"))
        await asyncio.sleep(0.3)  # a's statement is waiting on b's lock by then
        await caught("deadlock (1213)", b.run("UPDATE probe SET n = 5 WHERE id = 1"))
        if found["deadlock (1213)"]["class"] is None:
            await caught("deadlock (1213)", waiting)
        else:
            await waiting
        await a.rollback()
        await b.rollback()
    finally:
        await a.close()
        await b.close()

    # The server ends the session: during a statement, and while the connection sat idle.
    for what, during in (("killed during a query", True), ("killed while idle", False)):
        victim = await _Session(module, via_sqlalchemy, url).connect()
        victim_id = int(await victim.run("SELECT CONNECTION_ID()"))
        await victim.rollback()
        with contextlib.closing(_admin(url)) as admin, admin.cursor() as cursor:
            if during:
                query = asyncio.ensure_future(victim.run("SELECT SLEEP(5)"))
                await asyncio.sleep(0.3)
                cursor.execute(f"KILL CONNECTION {victim_id}")
                await caught(what, query)
            else:
                cursor.execute(f"KILL CONNECTION {victim_id}")
                await asyncio.sleep(0.3)
                await caught(what, victim.run("SELECT 1"))
        if not via_sqlalchemy:  # SQLAlchemy's connection is invalidated: it cannot go on
            await caught(f"{what}, next statement", victim.run("SELECT 1"))
        await victim.close()

    refused = _Session(module, via_sqlalchemy, url.set(port=_free_port()))
    await caught("connection refused (2003)", refused.connect())
    await refused.close()
    return found


def errors(url: URL, modules: list[str]) -> dict[str, Any]:
    """Per async driver, bare and through SQLAlchemy, what each provocation raised."""
    return {
        f"{module}{' (SQLAlchemy)' if via else ' (bare)'}": asyncio.run(
            _errors_of(module, via, url)
        )
        for module in modules
        for via in (False, True)
    }


# ----- output ---------------------------------------------------------------------------------


def table(figures: dict[str, dict[str, Any]]) -> str:
    lines = [
        f"{'driver':34} {'commits/s':>10} {'CPU µs/commit':>14} {'SELECT 1,000 rows ms':>21}",
    ]
    for name, found in figures.items():
        if "skipped" in found:
            lines.append(f"{name:34} skipped: {found['skipped']}")
            continue
        lines.append(
            f"{name:34} {found['commits_per_s']:>10,.0f} {found['cpu_us_per_commit']:>14,.1f}"
            f" {found['select_ms']:>21,.2f}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=ADMIN_URL, help="the MariaDB server (an admin URL)")
    parser.add_argument("--commits", type=int, default=1000, help="insert+commit per round")
    parser.add_argument("--selects", type=int, default=20, help="SELECTs per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", nargs="+", help="variants whose name holds one of these")
    parser.add_argument("--errors", action="store_true", help="also the async drivers' errors")
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    args = parser.parse_args()

    chosen = [v for v in VARIANTS if not args.only or any(o in v.name for o in args.only)]
    skipped = {v.name: reason for v in chosen if (reason := v.available()) is not None}
    runnable = [v for v in chosen if v.name not in skipped]
    admin = make_url(args.url)
    facts = server_facts(admin)
    print("server: " + ", ".join(f"{k}={v}" for k, v in facts.items()), flush=True)
    with bench_database(args.url) as url:
        figures: dict[str, dict[str, Any]] = dict(
            measure(url, runnable, args.commits, args.selects, args.rounds)
        )
        raised = (
            errors(url, sorted({v.module for v in runnable if v.is_async})) if args.errors else {}
        )
    figures.update({name: {"skipped": reason} for name, reason in skipped.items()})
    print(table(figures))
    for module, found in raised.items():
        print(f"\n{module} raises:")
        for what, seen in found.items():
            wrapped = f" wrapping {seen['driver_class']}" if "driver_class" in seen else ""
            invalidated = " (connection invalidated)" if seen.get("invalidated") else ""
            print(
                f"  {what:38} {seen['class']}{wrapped}{invalidated}"
                f" args[0]={seen['code']!r}: {seen['message']}"
            )
    if args.json is not None:
        versions = {}
        for v in runnable:
            with contextlib.suppress(Exception):
                from importlib.metadata import version

                dist = {"MySQLdb": "mysqlclient"}.get(v.module, v.module)
                versions[dist] = version(dist)
        result = {
            "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "python": platform.python_version(),
            "sqlalchemy": sa.__version__,
            "server": facts,
            "commits": args.commits,
            "selects": args.selects,
            "rounds": args.rounds,
            "drivers": versions,
            "figures": figures,
            "errors": raised,
        }
        args.json.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
