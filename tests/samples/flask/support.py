"""Small helpers for the Flask sample's tests: a signup request, and counting the application's
rows as the database holds them (committed, read on a connection of the test's own). What the
queue holds and runs is for ``caravel.testing``."""

from __future__ import annotations

import sqlalchemy as sa
from caravel_samples.flask.settings import Settings
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from tests.support.databases import sync_engine


def sign_up(client: FlaskClient, email: object, key: str | None = None) -> TestResponse:
    headers = {"Idempotency-Key": key} if key is not None else {}
    return client.post("/signups", json={"email": email}, headers=headers)


def count_rows(settings: Settings, table: str) -> int:
    engine = sync_engine(settings.database_url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text(f"SELECT COUNT(*) FROM {table}")).scalar_one())
    finally:
        engine.dispose()
