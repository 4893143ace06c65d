"""The welcome job, run by a real worker in the test's process: the synchronous handler marks
the signup in the application's table, on the application's clock. SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

from caravel_samples.flask.settings import Settings
from flask.testing import FlaskClient

from caravel import SyncQueue
from caravel.testing import ManualClock
from tests.samples.flask.support import count_rows, run_jobs, sign_up
from tests.support.databases import execute_sql


def test_the_worker_welcomes_the_signup(
    client: FlaskClient, queue: SyncQueue, clock: ManualClock
) -> None:
    location = sign_up(client, "ann@example.com").headers["Location"]
    queue.call(clock.advance, timedelta(seconds=5))

    assert run_jobs(queue) == 1
    signup = client.get(location).get_json()
    assert signup["welcomed_at"] == "2030-01-01T00:00:05.000Z"
    job = signup["welcome_job"]
    assert (job["state"], job["attempt"]) == ("completed", 1)
    assert job["finished_at"] == "2030-01-01T00:00:05.000Z"
    assert run_jobs(queue) == 0  # nothing left


def test_each_signup_gets_its_own_welcome(client: FlaskClient, queue: SyncQueue) -> None:
    locations = [sign_up(client, f"user{n}@example.com").headers["Location"] for n in range(3)]
    assert run_jobs(queue) == 3
    assert all(client.get(where).get_json()["welcomed_at"] is not None for where in locations)


def test_a_signup_deleted_before_its_welcome_completes_the_job_quietly(
    client: FlaskClient, queue: SyncQueue, settings: Settings
) -> None:
    location = sign_up(client, "ann@example.com").headers["Location"]
    job_id = client.get(location).get_json()["welcome_job"]["id"]
    execute_sql(settings.database_url, "DELETE FROM signups")

    assert run_jobs(queue) == 1
    status = queue.get_status(job_id, "signups")
    assert status is not None
    assert status.state.value == "completed"
    assert count_rows(settings, "signups") == 0
