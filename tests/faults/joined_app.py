"""The worker app of the exactly-once scenario (``caravel worker --app
tests.faults.joined_app:registry``): a handler whose effect lives in the queue's own database
and that completes its job in the same transaction (``ctx.complete_in_sync``).

The database URL is read from ``CARAVEL_FAULTS_APP_URL``, the queue's URL (the effect must be
in the queue's database to commit with the completion). Its tables, made by
:func:`create_joined_schema`, have no unique key on purpose, so nothing but the completion's
fence can keep a second effect out:

* ``joined_effects(job_id, attempt, pid)``: one row per committed execution;
* ``joined_events(job_id, attempt, pid, event)``: ``start`` for each execution begun, ``lost``
  for each whose completion found its lease taken over (``LeaseLostError``), each in its own
  transaction.

The handler pauses (a seeded, real sleep) before its completion and between the completion and
the commit, so that kills and stops land inside the transaction as well as around it.
"""

from __future__ import annotations

import os
import random
import threading
import time
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from caravel import JobContext, JobRegistry, LeaseLostError
from caravel.store.urls import sync_url
from tests.faults.effects_app import APP_URL_ENV, backend_of

__all__ = ["EFFECTS", "EVENTS", "Joined", "create_joined_schema", "drop_joined_schema", "registry"]

registry = JobRegistry()

EFFECTS = "joined_effects"
EVENTS = "joined_events"

_effects = sa.table(EFFECTS, sa.column("job_id", sa.String), sa.column("attempt"), sa.column("pid"))
_events = sa.table(
    EVENTS,
    sa.column("job_id", sa.String),
    sa.column("attempt"),
    sa.column("pid"),
    sa.column("event", sa.String),
)
_SCHEMA = {
    EFFECTS: "job_id VARCHAR(36), attempt INT, pid INT",
    EVENTS: "job_id VARCHAR(36), attempt INT, pid INT, event VARCHAR(8)",
}


@dataclass(frozen=True)
class Joined:
    """One job: ``before`` and ``after`` are the longest pauses (seconds) before the completion
    and between it and the commit, drawn per attempt from ``seed``; with ``stall``, attempt 1
    pauses that long before its completion instead."""

    value: int = 0
    before: float = 0.0
    after: float = 0.0
    seed: int = 0
    stall: float = 0.0


def create_joined_schema(url: str) -> None:
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            for table, columns in _SCHEMA.items():
                conn.execute(sa.text(f"DROP TABLE IF EXISTS {table}"))
                conn.execute(sa.text(f"CREATE TABLE {table} ({columns})"))
    finally:
        engine.dispose()


def drop_joined_schema(url: str) -> None:
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            for table in _SCHEMA:
                conn.execute(sa.text(f"DROP TABLE IF EXISTS {table}"))
    finally:
        engine.dispose()


def make_engine(url: str) -> sa.Engine:
    """The application's engine on ``url``; on SQLite each transaction begins IMMEDIATE (the
    writer lock taken up front, waited for up to 30 s), as the guide advises."""
    if backend_of(url) != "sqlite":
        return sa.create_engine(sync_url(url), pool_pre_ping=True)
    engine = sa.create_engine(sync_url(url), connect_args={"timeout": 30})

    @sa.event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # SQLAlchemy's "begin" event sends BEGIN itself

    @sa.event.listens_for(engine, "begin")
    def _begin(conn: sa.Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


_lock = threading.Lock()
_engine: list[sa.Engine] = []


def _app_engine() -> sa.Engine:
    with _lock:
        if not _engine:
            _engine.append(make_engine(os.environ[APP_URL_ENV]))
        return _engine[0]


@registry.handles("faults.joined.v1", Joined)
def joined(job: Joined, ctx: JobContext[object]) -> None:
    engine = _app_engine()
    pid = os.getpid()
    row = {"job_id": str(ctx.job_id), "attempt": ctx.attempt, "pid": pid}
    draw = random.Random(f"{job.seed}:{ctx.job_id}:{ctx.attempt}")
    _event(engine, row, "start")
    try:
        with Session(engine) as session, session.begin():
            session.execute(_effects.insert().values(row))
            stall = job.stall if job.stall and ctx.attempt == 1 else draw.uniform(0, job.before)
            time.sleep(stall)
            ctx.complete_in_sync(session, result={"attempt": ctx.attempt, "pid": pid})
            time.sleep(draw.uniform(0, job.after))
    except LeaseLostError:
        _event(engine, row, "lost")  # the effect rolled back with the transaction
        raise


def _event(engine: sa.Engine, row: dict[str, Any], event: str) -> None:
    with engine.begin() as conn:
        conn.execute(_events.insert().values({**row, "event": event}))
