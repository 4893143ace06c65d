"""The worker app of the exactly-once scenario (``caravel worker --app
tests.faults.joined_app:registry``): a handler whose effect lives in the queue's own database
and that completes its job in the same transaction (``ctx.complete_in_sync``).

The database URL is read from ``CARAVEL_FAULTS_APP_URL``, the queue's URL (the effect must be
in the queue's database to commit with the completion). Its tables, made by
:func:`create_joined_schema`, have no unique key on purpose, so nothing but the completion's
fence can keep a second effect out:

* ``joined_effects(job_id, attempt, pid)``: one row per committed execution;
* ``joined_starts(job_id, attempt, pid)``: one row per execution begun, in its own transaction
  (the reruns the kills caused).

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

from caravel import JobContext, JobRegistry
from caravel.store.urls import sync_url
from tests.faults.effects_app import APP_URL_ENV, backend_of

__all__ = ["EFFECTS", "STARTS", "Joined", "create_joined_schema", "drop_joined_schema", "registry"]

registry = JobRegistry()

EFFECTS = "joined_effects"
STARTS = "joined_starts"

_effects = sa.table(EFFECTS, sa.column("job_id", sa.String), sa.column("attempt"), sa.column("pid"))
_starts = sa.table(STARTS, sa.column("job_id", sa.String), sa.column("attempt"), sa.column("pid"))


@dataclass(frozen=True)
class Joined:
    """One job: ``before`` and ``after`` are the longest pauses (seconds) before the completion
    and between it and the commit, drawn per attempt from ``seed``."""

    value: int = 0
    before: float = 0.0
    after: float = 0.0
    seed: int = 0


def create_joined_schema(url: str) -> None:
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            for table in (EFFECTS, STARTS):
                conn.execute(sa.text(f"DROP TABLE IF EXISTS {table}"))
                conn.execute(
                    sa.text(f"CREATE TABLE {table} (job_id VARCHAR(36), attempt INT, pid INT)")
                )
    finally:
        engine.dispose()


def drop_joined_schema(url: str) -> None:
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            for table in (EFFECTS, STARTS):
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
    with engine.begin() as conn:
        conn.execute(_starts.insert().values(row))
    with Session(engine) as session, session.begin():
        session.execute(_effects.insert().values(row))
        time.sleep(draw.uniform(0, job.before))
        ctx.complete_in_sync(session, result={"attempt": ctx.attempt, "pid": pid})
        time.sleep(draw.uniform(0, job.after))
