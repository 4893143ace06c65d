"""An application database holding a broker-bound outbox table, for the bridge's tests in every
tier: the table is one of its own (``broker_outbox``), so the queue's relay never takes its
intents."""

from __future__ import annotations

from collections.abc import Iterator
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

__all__ = ["OUTBOX", "TABLE", "AppDb", "app_database", "queue_rows"]

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
