"""``POST /signups`` and ``GET /signups/<id>``: the signup row and its welcome job commit in one
transaction or not at all; retries with an idempotency key return what the first request made.
What the queue holds is read with ``caravel.testing``'s assertions. SQLite and PostgreSQL."""

from __future__ import annotations

from uuid import UUID

from caravel_samples.flask.jobs import QUEUE, WELCOME
from caravel_samples.flask.settings import Settings
from flask.testing import FlaskClient

from caravel import JobState, SyncQueue
from caravel.testing import all_enqueued, assert_enqueued, refute_enqueued
from tests.samples.flask.support import count_rows, sign_up


def test_a_signup_commits_its_row_and_its_welcome_job_together(
    client: FlaskClient, queue: SyncQueue, settings: Settings
) -> None:
    refute_enqueued(queue)
    created = sign_up(client, "  Ann@Example.COM ")
    assert created.status_code == 201, created.text
    body = created.get_json()
    assert body["already_enqueued"] is False
    assert created.headers["Location"] == f"/signups/{body['id']}"

    job = assert_enqueued(queue, WELCOME, queue_name=QUEUE, state=JobState.READY, count=1)
    assert job.job_id == UUID(body["job_id"])
    # The payload names the signup and nothing else: the address stays in the app's table.
    assert job.payload == {"signup_id": body["id"]}

    shown = client.get(created.headers["Location"])
    assert shown.status_code == 200
    signup = shown.get_json()
    assert signup["email"] == "ann@example.com"
    assert signup["created_at"] == "2030-01-01T00:00:00.000Z"  # the test's clock
    assert signup["welcomed_at"] is None
    assert signup["welcome_job"]["id"] == body["job_id"]
    assert signup["welcome_job"]["state"] == "ready"
    assert count_rows(settings, "signups") == 1


def test_the_same_key_and_body_return_the_same_signup_and_job(
    client: FlaskClient, queue: SyncQueue, settings: Settings
) -> None:
    first = sign_up(client, "ann@example.com", key="signup-1")
    again = sign_up(client, "ANN@example.com", key="signup-1")  # the same address, normalized
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.get_json() == {**first.get_json(), "already_enqueued": True}
    assert_enqueued(queue, WELCOME, payload={"signup_id": first.get_json()["id"]}, count=1)
    assert count_rows(settings, "signups") == 1


def test_the_same_key_with_another_body_is_a_conflict_and_writes_nothing(
    client: FlaskClient, queue: SyncQueue, settings: Settings
) -> None:
    kept = sign_up(client, "ann@example.com", key="signup-1").get_json()
    other = sign_up(client, "bob@example.com", key="signup-1")
    assert other.status_code == 409
    assert other.get_json() == {
        "error": {
            "type": "Conflict",
            "field": "Idempotency-Key",
            "rule": "was already used with a different body",
        }
    }
    assert b"\n" not in other.data.strip()  # one line
    assert [job.job_id for job in all_enqueued(queue, WELCOME)] == [UUID(kept["job_id"])]
    assert count_rows(settings, "signups") == 1


def test_a_failure_after_the_enqueue_rolls_the_job_back_with_the_row(
    client: FlaskClient, queue: SyncQueue, settings: Settings
) -> None:
    """The email is taken: the unique index fails at the flush, after the job's row was
    inserted in the same transaction. The rollback takes the job with it."""
    kept = sign_up(client, "ann@example.com", key="first").get_json()
    taken = sign_up(client, "ann@example.com", key="second")
    assert taken.status_code == 409
    assert taken.get_json()["error"] == {
        "type": "Conflict",
        "field": "email",
        "rule": "is already signed up",
    }
    assert [job.job_id for job in all_enqueued(queue, WELCOME)] == [UUID(kept["job_id"])]
    assert count_rows(settings, "signups") == 1
    # The key of the failed request was never used: it signs up someone else afresh.
    fresh = sign_up(client, "bob@example.com", key="second").get_json()
    assert {job.job_id for job in all_enqueued(queue, WELCOME)} == {
        UUID(kept["job_id"]),
        UUID(fresh["job_id"]),
    }


def test_signups_without_a_key_are_each_new(
    client: FlaskClient, queue: SyncQueue, settings: Settings
) -> None:
    ids = {sign_up(client, f"user{n}@example.com").get_json()["job_id"] for n in range(3)}
    assert len(ids) == 3
    assert sign_up(client, "user0@example.com").status_code == 409
    assert_enqueued(queue, WELCOME, count=3)
    assert count_rows(settings, "signups") == 3


def test_an_unknown_signup_is_404(client: FlaskClient) -> None:
    missing = client.get(f"/signups/{UUID(int=7)}")
    assert missing.status_code == 404
    assert missing.get_json()["error"]["field"] == "signup_id"
    assert client.get("/signups/not-a-uuid").status_code == 404
