"""What a one-job enqueue costs from synchronous code (:class:`caravel.SyncQueue`) beside the
same call awaited on :class:`caravel.DatabaseQueue`: wall time and this process's CPU per call,
every job with its own idempotency key, on a fresh database per backend.

Run it with ``python -m bench.sync_cost [jobs] [rounds]`` (or ``python -m bench --only sync``):
the rounds alternate between the two callers, so a machine whose speed drifts affects both
alike, and the figures are the medians of the rounds. A third figure is the sync call inside
the caller's own transaction (``session=``, a SQLAlchemy ``Session`` committed per job), which
also pays for the caller's commit.

The floor beside them (``bare``): the driver alone (``sqlite3`` in WAL mode with
``synchronous=FULL``, as Caravel opens it; psycopg in autocommit on PostgreSQL; PyMySQL in
autocommit on MariaDB, the driver of its synchronous calls) inserting a copy
of the very row Caravel wrote, with a new id and key, and committing it, once per job.
``async_over_bare`` is the bare loop's time per job over the awaited enqueue's: the share of
the driver's own speed a one-call enqueue keeps.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from bench.apps import Noop, registry
from bench.ceilings import MariaRow
from bench.databases import database, mariadb_connect, postgres_dsn
from caravel import DatabaseQueue, DispatchOptions, SyncQueue
from caravel.store.urls import backend_of, sync_url

QUEUE = "bench"


def _per_call(
    jobs: int, run: Callable[[list[DispatchOptions]], object], keys: list[DispatchOptions]
) -> dict[str, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    run(keys)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"us_per_call": wall / jobs * 1e6, "cpu_us_per_call": cpu / jobs * 1e6}


def _keys(prefix: str, jobs: int) -> list[DispatchOptions]:
    return [DispatchOptions(queue=QUEUE, idempotency_key=f"{prefix}-{i}") for i in range(jobs)]


class _Bare:
    """The driver's own insert-and-commit of a copy of a row Caravel wrote (see the module's
    docstring), over one connection opened beforehand."""

    def __init__(self, url: str) -> None:
        self.sqlite = url.startswith("sqlite")
        self.mariadb = backend_of(url) == "mariadb"
        if self.mariadb:
            self.copy = MariaRow(url)
            self.conn: Any = mariadb_connect(url)
            self.sql = self.copy.sql
            return
        if self.sqlite:
            conn = sqlite3.connect(make_url(url).database or "", isolation_level=None)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            self.conn = conn
            mark = "?"
        else:
            self.conn = psycopg.connect(postgres_dsn(url), autocommit=True)
            mark = "%s"
        cursor = self.conn.execute("SELECT * FROM caravel_jobs LIMIT 1")
        self.row = list(cursor.fetchone())
        columns = [d[0] for d in cursor.description]
        self.id_at, self.key_at = columns.index("id"), columns.index("idempotency_key")
        self.sql = (
            f"INSERT INTO caravel_jobs ({', '.join(columns)}) "
            f"VALUES ({', '.join([mark] * len(columns))})"
        )

    def rows(self, prefix: str, jobs: int) -> list[tuple[Any, ...]]:
        if self.mariadb:
            return self.copy.rows(prefix, jobs)
        made = []
        for i in range(jobs):
            row = list(self.row)
            fresh = uuid.uuid4()
            row[self.id_at] = str(fresh) if self.sqlite else fresh
            row[self.key_at] = f"{prefix}-{i}"
            made.append(tuple(row))
        return made

    def insert(self, rows: list[tuple[Any, ...]]) -> None:
        if self.mariadb:
            with self.conn.cursor() as cursor:
                for row in rows:
                    cursor.execute(self.sql, row)  # autocommit: each its own durable commit
            return
        execute = self.conn.execute
        if self.sqlite:
            for row in rows:
                execute("BEGIN IMMEDIATE")
                execute(self.sql, row)
                execute("COMMIT")
        else:
            for row in rows:
                execute(self.sql, row, prepare=True)

    def close(self) -> None:
        self.conn.close()


def measure(url: str, jobs: int, rounds: int) -> dict[str, Any]:
    """Medians over ``rounds`` of each caller's cost per call."""
    loop = asyncio.new_event_loop()
    async_queue = DatabaseQueue(url, registry)
    sync_queue = SyncQueue(url, registry)
    engine = sa.create_engine(sync_url(url))
    job = Noop(0)
    try:
        # Warm-ups: connections opened, statements prepared, the identity read once.
        loop.run_until_complete(async_queue.enqueue(job, DispatchOptions(queue=QUEUE)))
        sync_queue.enqueue(job, DispatchOptions(queue=QUEUE))
        with Session(engine) as session:
            sync_queue.enqueue(job, DispatchOptions(queue=QUEUE), session=session)
            session.commit()
        bare = _Bare(url)
        bare.insert(bare.rows("warm", 1))
        figures: dict[str, list[dict[str, float]]] = {
            "async": [],
            "sync": [],
            "sync_session": [],
            "bare": [],
        }

        async def awaited(keys: list[DispatchOptions]) -> None:
            for options in keys:
                await async_queue.enqueue(job, options)

        def blocking_awaited(keys: list[DispatchOptions]) -> None:
            loop.run_until_complete(awaited(keys))

        def called(keys: list[DispatchOptions]) -> None:
            for options in keys:
                sync_queue.enqueue(job, options)

        def in_session(keys: list[DispatchOptions]) -> None:
            with Session(engine) as session:
                for options in keys:
                    sync_queue.enqueue(job, options, session=session)
                    session.commit()

        for r in range(rounds):
            figures["async"].append(_per_call(jobs, blocking_awaited, _keys(f"a{r}", jobs)))
            figures["sync"].append(_per_call(jobs, called, _keys(f"s{r}", jobs)))
            figures["sync_session"].append(_per_call(jobs, in_session, _keys(f"t{r}", jobs)))
            figures["bare"].append(_per_call(jobs, bare.insert, bare.rows(f"b{r}", jobs)))
        bare.close()
    finally:
        sync_queue.close()
        loop.run_until_complete(async_queue.close())
        loop.close()
        engine.dispose()
    out: dict[str, Any] = {"jobs": jobs, "rounds": rounds}
    for caller, measured in figures.items():
        for key in ("us_per_call", "cpu_us_per_call"):
            out[f"{caller}_{key}"] = round(statistics.median(m[key] for m in measured), 1)
    out["sync_over_async"] = round(out["sync_us_per_call"] / out["async_us_per_call"], 3)
    out["async_over_bare"] = round(out["bare_us_per_call"] / out["async_us_per_call"], 3)
    out["sync_over_bare"] = round(out["bare_us_per_call"] / out["sync_us_per_call"], 3)
    return out


def run(backends: list[str], jobs: int = 2000, rounds: int = 5) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for backend in backends:
        with database(backend) as url:
            results[backend] = measure(url, jobs, rounds)
    return results


def main() -> None:
    jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    print(json.dumps(run(["postgresql", "sqlite"], jobs, rounds), indent=2))


if __name__ == "__main__":
    main()
