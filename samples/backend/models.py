"""Request and response bodies. JSON names are camelCase; unknown request fields are ignored
(so a client's ``tenantId`` or ``ownerId`` has no effect: ownership comes from the session)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated
from uuid import UUID

from caravel_samples.backend.validation import (
    Email,
    LoginEmail,
    NewPassword,
    NoteText,
    Password,
)
from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, WithJsonSchema
from pydantic.alias_generators import to_camel


def _utc_text(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


#: A moment in UTC, written like 2026-09-28T12:34:56.789Z (times are kept to the millisecond).
UtcTime = Annotated[
    datetime,
    PlainSerializer(_utc_text, return_type=str),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]


class ApiModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


# ----- accounts ---------------------------------------------------------------------------


class LoginRequest(ApiModel):
    email: LoginEmail
    password: Password


class RegisterRequest(ApiModel):
    email: Email
    password: NewPassword


class CsrfToken(ApiModel):
    token: str


class Me(ApiModel):
    id: UUID
    email: str
    operator: bool
    permissions: list[str]


# ----- notes ------------------------------------------------------------------------------


class NoteRequest(ApiModel):
    text: NoteText


class Note(ApiModel):
    id: UUID
    text: str
    created_at: UtcTime


class NoteList(ApiModel):
    items: list[Note]


# ----- counter ----------------------------------------------------------------------------


class CounterEventRequest(ApiModel):
    quantity: Annotated[int, Field(strict=True, ge=1, le=1000)]


class Accepted(ApiModel):
    job_id: UUID
    already_enqueued: bool


class CounterJob(ApiModel):
    job_id: UUID
    state: str
    attempt: int
    max_attempts: int
    due_at: UtcTime
    created_at: UtcTime
    updated_at: UtcTime
    started_at: UtcTime | None
    finished_at: UtcTime | None
    failure_category: str | None


class CounterResult(ApiModel):
    job_id: UUID
    quantity: int
    recorded_at: UtcTime


class ResultPage(ApiModel):
    from_: UtcTime = Field(alias="from")
    to: UtcTime
    offset: int
    limit: int
    items: list[CounterResult]


class Summary(ApiModel):
    from_: UtcTime = Field(alias="from")
    to: UtcTime
    count: int
    total: int


# ----- monitoring -------------------------------------------------------------------------


class JobView(ApiModel):
    id: UUID
    job_type: str
    state: str
    tenant_id: str
    attempt: int
    max_attempts: int
    due_at: UtcTime
    created_at: UtcTime
    started_at: UtcTime | None
    finished_at: UtcTime | None
    failure_category: str | None


class JobList(ApiModel):
    items: list[JobView]


class Problem(ApiModel):
    """The body of every error response."""

    detail: str
