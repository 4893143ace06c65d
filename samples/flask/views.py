"""The HTTP interface: ``POST /signups`` and ``GET /signups/<id>``, and errors as one line of
JSON naming the field and the rule, never echoing the value."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from caravel_samples.flask.jobs import QUEUE
from caravel_samples.flask.services import services_of
from caravel_samples.flask.signups import ConflictError
from flask import Blueprint, Flask, Response, jsonify, request, url_for
from werkzeug.exceptions import HTTPException

from caravel import ValidationError

KEY_HEADER = "Idempotency-Key"
_MAX_EMAIL = 254
_MAX_KEY = 128  # the queue's limit for idempotency keys

blueprint = Blueprint("signups", __name__)


class BadRequestError(ValidationError):
    """The request is not what the endpoint reads at all (HTTP 400): not a JSON object."""


def install(app: Flask) -> None:
    app.register_blueprint(blueprint)
    app.register_error_handler(ValidationError, _invalid)
    app.register_error_handler(HTTPException, _http_error)


@blueprint.post("/signups")
def create_signup() -> tuple[Response, int, dict[str, str]]:
    email = _email(_body())
    key = _idempotency_key()
    accepted = services_of().signups.sign_up(email, key)
    body = {
        "id": str(accepted.signup_id),
        "job_id": str(accepted.job_id),
        "already_enqueued": accepted.replayed,
    }
    location = url_for("signups.show_signup", signup_id=accepted.signup_id)
    return jsonify(body), 200 if accepted.replayed else 201, {"Location": location}


@blueprint.get("/signups/<uuid:signup_id>")
def show_signup(signup_id: UUID) -> Response | tuple[Response, int]:
    services = services_of()
    signup = services.signups.find(signup_id)
    if signup is None:
        return _error("NotFound", "signup_id", "names no signup"), 404
    status = services.queue.get_status(signup.welcome_job_id, QUEUE)
    job = None
    if status is not None:  # None once the queue's retention removed the finished job
        job = {
            "id": str(status.job_id),
            "state": status.state.value,
            "attempt": status.attempt,
            "max_attempts": status.max_attempts,
            "finished_at": _iso(status.finished_at),
        }
    return jsonify(
        {
            "id": str(signup.id),
            "email": signup.email,
            "created_at": _iso_ms(signup.created_at_ms),
            "welcomed_at": _iso_ms(signup.welcomed_at_ms),
            "welcome_job": job,
        }
    )


# ----- reading the request ---------------------------------------------------------------------


def _body() -> dict[str, Any]:
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise BadRequestError("body", "must be a JSON object, sent as application/json")
    if set(body) - {"email"}:
        raise ValidationError("body", "has a field other than email, the only one it takes")
    return body


def _email(body: dict[str, Any]) -> str:
    """The address, trimmed and in lower case. A light check: the welcome itself proves it."""
    value = body.get("email")
    rule = f"must be an email address like name@example.com, at most {_MAX_EMAIL} characters"
    if not isinstance(value, str):
        raise ValidationError("email", rule)
    email = value.strip().lower()
    local, at, domain = email.partition("@")
    if (
        not at
        or not local
        or "." not in domain.strip(".")
        or "@" in domain
        or len(email) > _MAX_EMAIL
        or any(c.isspace() for c in email)
    ):
        raise ValidationError("email", rule)
    return email


def _idempotency_key() -> str | None:
    key = request.headers.get(KEY_HEADER)
    if key is None:
        return None
    if not (1 <= len(key) <= _MAX_KEY) or not all("!" <= c <= "~" for c in key):
        raise ValidationError(KEY_HEADER, f"must be 1 to {_MAX_KEY} visible ASCII characters")
    return key


# ----- answering -------------------------------------------------------------------------------


def _error(kind: str, field: str, rule: str) -> Response:
    return jsonify({"error": {"type": kind, "field": field, "rule": rule}})


def _invalid(exc: ValidationError) -> tuple[Response, int]:
    if isinstance(exc, ConflictError):
        return _error("Conflict", exc.field, exc.rule), 409
    if isinstance(exc, BadRequestError):
        return _error("BadRequest", exc.field, exc.rule), 400
    # From this module or from the queue itself (it checks the same limits again).
    return _error("ValidationError", exc.field, exc.rule), 422


def _http_error(exc: HTTPException) -> tuple[Response, int]:
    """Flask's own refusals (404, 405, 413) in the same shape."""
    code = exc.code or 500
    rule = (exc.description or exc.name).split("\n")[0]
    return _error(exc.name.replace(" ", ""), "request", rule), code


def _iso_ms(ms: int | None) -> str | None:
    if ms is None:
        return None
    return _iso(datetime.fromtimestamp(ms / 1000, tz=UTC))


def _iso(moment: datetime | None) -> str | None:
    """UTC with milliseconds and a Z, as the ``caravel`` command's JSON writes times."""
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
