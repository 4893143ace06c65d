"""The welcome job: ``caravel.testing.drain`` runs it through the real worker in the test's
process, and the synchronous handler marks the signup in the application's table, on the
application's clock; ``perform_sync`` runs the handler again, as a redelivery would. SQLite and
PostgreSQL."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

from caravel_samples.flask.jobs import WELCOME, SendWelcome
from caravel_samples.flask.settings import Settings
from flask.testing import FlaskClient

from caravel import JobState, SyncQueue
from caravel.testing import ManualClock, assert_enqueued, drain, perform_sync
from tests.samples.flask.support import count_rows, sign_up
from tests.support.databases import execute_sql


def test_the_worker_welcomes_the_signup(
    client: FlaskClient, queue: SyncQueue, caravel_clock: ManualClock
) -> None:
    created = sign_up(client, "ann@example.com")
    location = created.headers["Location"]
    queue.call(caravel_clock.advance, timedelta(seconds=5))

    runs = drain(queue)
    assert [(run.job_type, run.attempt, run.outcome) for run in runs] == [(WELCOME, 1, "completed")]
    assert runs[0].job_id == UUID(created.get_json()["job_id"])
    signup = client.get(location).get_json()
    assert signup["welcomed_at"] == "2030-01-01T00:00:05.000Z"
    job = signup["welcome_job"]
    assert (job["state"], job["attempt"]) == ("completed", 1)
    assert job["finished_at"] == "2030-01-01T00:00:05.000Z"
    assert drain(queue) == []  # nothing left


def test_running_the_handler_again_changes_nothing(
    client: FlaskClient, queue: SyncQueue, caravel_clock: ManualClock
) -> None:
    """A worker that dies after the handler's commit and before the acknowledgement makes the
    job run again: the second run finds the mark set and keeps the first time."""
    created = sign_up(client, "ann@example.com").get_json()
    assert [run.outcome for run in drain(queue)] == ["completed"]
    queue.call(caravel_clock.advance, timedelta(minutes=10))

    perform_sync(queue.queue.registry, SendWelcome(UUID(created["id"])), queue="signups")
    shown = client.get(f"/signups/{created['id']}").get_json()
    assert shown["welcomed_at"] == "2030-01-01T00:00:00.000Z"


def test_each_signup_gets_its_own_welcome(client: FlaskClient, queue: SyncQueue) -> None:
    locations = [sign_up(client, f"user{n}@example.com").headers["Location"] for n in range(3)]
    assert [run.outcome for run in drain(queue)] == ["completed"] * 3
    assert all(client.get(where).get_json()["welcomed_at"] is not None for where in locations)
    assert_enqueued(queue, WELCOME, state=JobState.COMPLETED, count=3)


def test_a_signup_deleted_before_its_welcome_completes_the_job_quietly(
    client: FlaskClient, queue: SyncQueue, settings: Settings
) -> None:
    sign_up(client, "ann@example.com")
    execute_sql(settings.database_url, "DELETE FROM signups")

    assert [run.outcome for run in drain(queue)] == ["completed"]
    assert count_rows(settings, "signups") == 0
