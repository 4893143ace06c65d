"""``POST /signups`` and ``GET /signups/<id>``: the signup row and its welcome job commit in one
transaction or not at all; retries with an idempotency key return what the first request made.
SQLite and PostgreSQL."""

from __future__ import annotations

import json
from uuid import UUID

from caravel_samples.flask.jobs import QUEUE, WELCOME
from caravel_samples.flask.settings import Settings
from flask.testing import FlaskClient

from caravel import JobState, SyncQueue
from tests.samples.flask.support import count_rows, sign_up


def test_a_signup_commits_its_row_and_its_welcome_job_together(
    client: FlaskClient, queue: SyncQueue, settings: Settings
) -> None:
    created = sign_up(client, "  Ann@Example.COM ")
    assert created.status_code == 201, created.text
    body = created.get_json()
    assert body["already_enqueued"] is False
    assert created.headers["Location"] == f"/signups/{body['id']}"

    status = queue.get_status(body["job_id"], QUEUE)
    assert status is not None
    assert (status.job_type, status.state) == (WELCOME, JobState.READY)
    # The payload names the signup and nothing else: the address stays in the app's table.
    payload = queue.get_payload(body["job_id"], QUEUE)
    assert payload is not None
    assert json.loads(payload) == {"signup_id": body["id"]}

    shown = client.get(created.headers["Location"])
    assert shown.status_code == 200
    signup = shown.get_json()
    assert signup["email"] == "ann@example.com"
    assert signup["created_at"] == "2030-01-01T00:00:00.000Z"  # the test's clock
    assert signup["welcomed_at"] is None
    assert signup["welcome_job"]["id"] == body["job_id"]
    assert signup["welcome_job"]["state"] == "ready"
    assert (count_rows(settings, "signups"), count_rows(settings, "caravel_jobs")) == (1, 1)


def test_the_same_key_and_body_return_the_same_signup_and_job(
    client: FlaskClient, settings: Settings
) -> None:
    first = sign_up(client, "ann@example.com", key="signup-1")
    again = sign_up(client, "ANN@example.com", key="signup-1")  # the same address, normalized
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.get_json() == {**first.get_json(), "already_enqueued": True}
    assert (count_rows(settings, "signups"), count_rows(settings, "caravel_jobs")) == (1, 1)


def test_the_same_key_with_another_body_is_a_conflict_and_writes_nothing(
    client: FlaskClient, settings: Settings
) -> None:
    assert sign_up(client, "ann@example.com", key="signup-1").status_code == 201
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
    assert (count_rows(settings, "signups"), count_rows(settings, "caravel_jobs")) == (1, 1)


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
    assert (count_rows(settings, "signups"), count_rows(settings, "caravel_jobs")) == (1, 1)
    assert queue.get_status(kept["job_id"], QUEUE) is not None
    # The key of the failed request was never used: it signs up someone else afresh.
    fresh = sign_up(client, "bob@example.com", key="second")
    assert fresh.status_code == 201
    assert fresh.get_json()["job_id"] != kept["job_id"]


def test_signups_without_a_key_are_each_new(client: FlaskClient, settings: Settings) -> None:
    ids = {sign_up(client, f"user{n}@example.com").get_json()["job_id"] for n in range(3)}
    assert len(ids) == 3
    assert sign_up(client, "user0@example.com").status_code == 409
    assert (count_rows(settings, "signups"), count_rows(settings, "caravel_jobs")) == (3, 3)


def test_an_unknown_signup_is_404(client: FlaskClient) -> None:
    missing = client.get(f"/signups/{UUID(int=7)}")
    assert missing.status_code == 404
    assert missing.get_json()["error"]["field"] == "signup_id"
    assert client.get("/signups/not-a-uuid").status_code == 404
