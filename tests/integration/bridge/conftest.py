"""Fixtures of the bridge's integration tests: the shared RabbitMQ server with names of each
test's own, and an application database holding a broker-bound outbox table, on SQLite and
PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from caravel import DispatchOptions
from caravel.outbox import Outbox, add_outbox
from caravel.store.urls import sync_url
from tests.support import make_registry
from tests.support.databases import create_pg_database, drop_pg_database, sqlite_url
from tests.support.rabbitmq import Names, rabbitmq_available

#: A broker-bound outbox: a table of its own, so the queue's relay never takes its intents.
TABLE = "broker_outbox"
app_metadata = sa.MetaData()
Envelope = add_outbox(app_metadata, name=TABLE)
OUTBOX = app_metadata.tables[TABLE]


@pytest.fixture(scope="session")
def rabbitmq() -> None:
    rabbitmq_available()


@pytest.fixture
async def names(rabbitmq: None) -> AsyncIterator[Names]:
    made = Names()
    try:
        yield made
    finally:
        await made.cleanup()


class AppDb:
    """An application database with the broker-bound outbox table."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = sa.create_engine(sync_url(url), poolclass=sa.pool.NullPool)

    def stage(self, jobs: list[tuple[object, DispatchOptions]]) -> list[UUID]:
        box = Outbox(make_registry(), Envelope)
        with Session(self.engine) as session:
            ids = [box.stage(session, job, options).outbox_id for job, options in jobs]
            session.commit()
        return ids

    def envelopes(self) -> dict[UUID, Any]:
        with self.engine.connect() as conn:
            return {row.id: row for row in conn.execute(sa.select(OUTBOX))}


@pytest.fixture(params=("sqlite", "postgresql"))
def app_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AppDb]:
    url = (
        sqlite_url(tmp_path / "app.db") if request.param == "sqlite" else create_pg_database("app")
    )
    db = AppDb(url)
    try:
        app_metadata.create_all(db.engine)  # stands in for the application's migration
        yield db
    finally:
        db.engine.dispose()
        if request.param == "postgresql":
            drop_pg_database(url)
