"""An application database holding a broker-bound outbox table, for the bridge's tests in every
tier: the table is one of its own (``broker_outbox``), so the queue's relay never takes its
intents."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.orm import Session

from caravel import DispatchOptions, JobRegistry
from caravel.outbox import Outbox, add_outbox
from caravel.store.schema import jobs
from caravel.store.urls import sync_url
from tests.support.databases import create_pg_database, drop_pg_database, sqlite_url
from tests.support.processes import CARAVEL, PYTHONPATH, ROOT

__all__ = [
    "OUTBOX",
    "TABLE",
    "AppDb",
    "app_database",
    "ended",
    "environment",
    "finish",
    "queue_rows",
    "run",
    "start",
]

TABLE = "broker_outbox"
app_metadata = sa.MetaData()
Envelope = add_outbox(app_metadata, name=TABLE)
OUTBOX = app_metadata.tables[TABLE]


class AppDb:
    """An application database with the broker-bound outbox table."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = sa.create_engine(sync_url(url), poolclass=sa.pool.NullPool)

    def stage(
        self, registry: JobRegistry, jobs_to_stage: list[tuple[object, DispatchOptions]]
    ) -> list[UUID]:
        box = Outbox(registry, Envelope)
        with Session(self.engine) as session:
            ids = [box.stage(session, job, options).outbox_id for job, options in jobs_to_stage]
            session.commit()
        return ids

    def envelopes(self) -> dict[UUID, Any]:
        with self.engine.connect() as conn:
            return {row.id: row for row in conn.execute(sa.select(OUTBOX))}

    def pending(self) -> int:
        return sum(row.dispatched_at is None for row in self.envelopes().values())


@contextmanager
def app_database(backend: str, tmp_path: Path) -> Iterator[AppDb]:
    """A fresh application database (SQLite or PostgreSQL) with the outbox table created, as
    the application's own migration would."""
    url = sqlite_url(tmp_path / "app.db") if backend == "sqlite" else create_pg_database("app")
    db = AppDb(url)
    try:
        app_metadata.create_all(db.engine)
        yield db
    finally:
        db.engine.dispose()
        if backend == "postgresql":
            drop_pg_database(url)


def queue_rows(url: str) -> list[Any]:
    """Every job row of the queue database at ``url``."""
    engine = sa.create_engine(sync_url(url), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return list(
                conn.execute(
                    sa.select(
                        jobs.c.id,
                        jobs.c.queue,
                        jobs.c.tenant_id,
                        jobs.c.job_type,
                        jobs.c.payload,
                        jobs.c.idempotency_key,
                        jobs.c.trace_context,
                    )
                )
            )
    finally:
        engine.dispose()


# ----- ``caravel bridge`` as a subprocess ----------------------------------------------------


def environment(failpoint: str | None = None) -> dict[str, str]:
    """The environment of a ``caravel bridge`` process: this checkout's code, no URLs or
    failpoints inherited, ``failpoint`` set if given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CARAVEL_")}
    env.update({"PYTHONPATH": PYTHONPATH, "NO_COLOR": "1", "TERM": "dumb"})
    if failpoint is not None:
        env["CARAVEL_FAILPOINT"] = failpoint
    return env


def start(args: Sequence[str], failpoint: str | None = None) -> subprocess.Popen[str]:
    """``caravel bridge ARGS`` running in the background."""
    return subprocess.Popen(
        [CARAVEL, "bridge", *args],
        cwd=ROOT,
        env=environment(failpoint),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """``caravel bridge ARGS`` to its end."""
    return subprocess.run(
        [CARAVEL, "bridge", *args],
        cwd=ROOT,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def finish(process: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str, str]:
    """The exit code, stdout and stderr of ``process``, killed (and failing) past ``timeout``."""
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        raise AssertionError(f"did not exit within {timeout}s; stderr:\n{err}") from None
    return process.returncode, out, err


def ended(*processes: subprocess.Popen[str]) -> None:
    """Kill whichever of ``processes`` still runs (a test that failed half way)."""
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.communicate()
