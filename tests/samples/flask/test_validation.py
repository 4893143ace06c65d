"""Bad input: 400 when the body is not a JSON object, 422 naming the field and the rule when a
value breaks one. The value is never repeated, and nothing is written. SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from caravel_samples.flask.settings import Settings
from flask.testing import FlaskClient

from caravel import SyncQueue
from caravel.testing import refute_enqueued
from tests.samples.flask.support import count_rows, sign_up

EMAIL_RULE = "must be an email address like name@example.com, at most 254 characters"


@pytest.mark.parametrize(
    "email",
    [
        "",
        "ann",
        "ann@",
        "@example.com",
        "ann@localhost",
        "a b@example.com",
        "a@b@example.com",
        "x" * 250 + "@example.com",
        42,
        None,
        ["ann@example.com"],
    ],
)
def test_a_bad_email_is_422_naming_the_field(
    client: FlaskClient, queue: SyncQueue, settings: Settings, email: object
) -> None:
    response = sign_up(client, email)
    assert response.status_code == 422
    assert response.get_json() == {
        "error": {"type": "ValidationError", "field": "email", "rule": EMAIL_RULE}
    }
    refute_enqueued(queue)
    assert count_rows(settings, "signups") == 0


@pytest.mark.parametrize(
    ("request_args", "status", "field"),
    [
        ({"data": "not json", "content_type": "application/json"}, 400, "body"),
        ({"data": '{"email": "ann@example.com"}', "content_type": "text/plain"}, 400, "body"),
        ({"json": ["ann@example.com"]}, 400, "body"),
        ({"json": {"email": "ann@example.com", "admin": True}}, 422, "body"),
        ({"json": {}}, 422, "email"),
        (
            {"json": {"email": "ann@example.com"}, "headers": {"Idempotency-Key": "a b"}},
            422,
            "Idempotency-Key",
        ),
        (
            {"json": {"email": "ann@example.com"}, "headers": {"Idempotency-Key": "k" * 129}},
            422,
            "Idempotency-Key",
        ),
    ],
)
def test_a_malformed_request_names_what_is_wrong_and_writes_nothing(
    client: FlaskClient,
    queue: SyncQueue,
    settings: Settings,
    request_args: dict[str, Any],
    status: int,
    field: str,
) -> None:
    response = client.post("/signups", **request_args)
    assert response.status_code == status, response.text
    assert response.get_json()["error"]["field"] == field
    assert "ann@example.com" not in response.text
    refute_enqueued(queue)
    assert count_rows(settings, "signups") == 0


def test_a_body_over_the_limit_is_413(
    client: FlaskClient, queue: SyncQueue, settings: Settings
) -> None:
    response = client.post("/signups", json={"email": "ann@example.com", "padding": "x" * 20_000})
    assert response.status_code == 413
    assert response.get_json()["error"]["type"] == "RequestEntityTooLarge"
    refute_enqueued(queue)
    assert count_rows(settings, "signups") == 0
