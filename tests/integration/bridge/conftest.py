"""Fixtures of the bridge's integration tests: the shared RabbitMQ server with names of each
test's own, and an application database holding a broker-bound outbox table, on SQLite and
PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.support.bridge import AppDb, app_database
from tests.support.rabbitmq import Names, rabbitmq_available


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


@pytest.fixture(params=("sqlite", "postgresql"))
def app_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AppDb]:
    with app_database(request.param, tmp_path) as db:
        yield db
