"""Small helpers for the Flask sample's tests: a signup request, counting rows as the database
holds them (committed, read on a connection of the test's own), and running due jobs."""

from __future__ import annotations

import sqlalchemy as sa
from caravel_samples.flask.jobs import QUEUE
from caravel_samples.flask.settings import Settings
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from caravel import QueueWorker, SyncQueue
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


def run_jobs(queue: SyncQueue) -> int:
    """Run the due welcome jobs through a real worker on the application's queue, one at a
    time until none is due; how many ran."""

    async def work() -> int:
        ran = 0
        async with QueueWorker(queue.queue) as worker:
            while await worker.run_once(QUEUE):
                ran += 1
        return ran

    return queue.call(work)
