"""The counter API: submit events to the queue, watch their jobs, read results and totals.

Every query is scoped to the signed-in user: the queue tenant and the results owner are the
user's id, taken from the session. Another user's job id answers 404, as if it did not exist.
"""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from caravel_samples.backend import results
from caravel_samples.backend.accounts import User
from caravel_samples.backend.guards import SignedInRoute, current_user, services
from caravel_samples.backend.jobs import QUEUE, CounterEvent
from caravel_samples.backend.models import (
    Accepted,
    CounterEventRequest,
    CounterJob,
    CounterResult,
    Problem,
    ResultPage,
    Summary,
)
from caravel_samples.backend.timerange import (
    UTC_PATTERN,
    TimeRangeError,
    Window,
    now_ms,
    resolve,
    to_datetime,
)
from caravel_samples.backend.validation import (
    KEY_PATTERN,
    MAX_IDEMPOTENCY_KEY_CHARS,
    check_idempotency_key,
)
from fastapi import APIRouter, Depends, Header, HTTPException, Query, Request, Response

from caravel import DispatchOptions, IdempotencyConflictError

router = APIRouter(prefix="/counter", tags=["counter"], route_class=SignedInRoute)

KEY_HEADER = "Idempotency-Key"

From = Annotated[
    str | None,
    Query(
        alias="from",
        pattern=UTC_PATTERN,
        description="UTC start, inclusive, e.g. 2026-09-28T00:00:00Z",
    ),
]
To = Annotated[str | None, Query(pattern=UTC_PATTERN, description="UTC end, exclusive")]


def _window(start: str | None, end: str | None) -> Window:
    try:
        return resolve(start, end, now=now_ms())
    except TimeRangeError as exc:
        raise HTTPException(400, str(exc)) from None


@router.post(
    "/events",
    status_code=202,
    response_model=Accepted,
    responses={
        409: {"model": Problem, "description": "The key was used with another quantity"},
        503: {"model": Problem, "description": "The queue is unavailable; nothing was accepted"},
    },
)
async def submit_event(
    body: CounterEventRequest,
    request: Request,
    response: Response,
    user: Annotated[User, Depends(current_user)],
    idempotency_key: Annotated[
        str,
        Header(
            alias=KEY_HEADER,
            # Documented only: the check below reads the raw bytes as UTF-8, which Starlette's
            # Latin-1 text (what a validating parameter would see) cannot give back.
            json_schema_extra={
                "minLength": 1,
                "maxLength": MAX_IDEMPOTENCY_KEY_CHARS,
                "pattern": KEY_PATTERN,
            },
            description="Names this submission for safe retries: UTF-8, nonblank, at most 128 "
            "characters, no control characters",
        ),
    ],
) -> Accepted:
    """Queue an event for the signed-in user. 202 means the job is durably saved, not that it
    has run; a retry with the same key and quantity returns the same job."""
    # ``idempotency_key`` documents the header and rejects a missing one; the check below also
    # sees a repeated header, which a single parameter would hide.
    name = KEY_HEADER.lower().encode("ascii")
    try:
        key = check_idempotency_key([v for k, v in request.headers.raw if k.lower() == name])
    except ValueError as exc:
        raise HTTPException(400, str(exc)) from None
    dispatch = DispatchOptions(queue=QUEUE, tenant_id=user.tenant_id, idempotency_key=key)
    try:
        accepted = await services(request).queue.enqueue(CounterEvent(body.quantity), dispatch)
    except IdempotencyConflictError:
        raise HTTPException(
            409, f"this {KEY_HEADER} was already used with a different quantity"
        ) from None
    response.headers["Location"] = f"/counter/jobs/{accepted.job_id}"
    return Accepted(job_id=accepted.job_id, already_enqueued=accepted.already_enqueued)


@router.get(
    "/jobs/{job_id}",
    response_model=CounterJob,
    responses={404: {"model": Problem, "description": "No such job of yours"}},
)
async def get_job(
    job_id: UUID, request: Request, user: Annotated[User, Depends(current_user)]
) -> CounterJob:
    """The state and attempts of one of the signed-in user's jobs."""
    status = await services(request).queue.get_status(job_id, QUEUE, user.tenant_id)
    if status is None:
        raise HTTPException(404, "no such job")
    return CounterJob(
        job_id=status.job_id,
        state=status.state.value,
        attempt=status.attempt,
        max_attempts=status.max_attempts,
        due_at=status.due_at,
        created_at=status.created_at,
        updated_at=status.updated_at,
        started_at=status.started_at,
        finished_at=status.finished_at,
        failure_category=status.last_failure,
    )


@router.get("/results", response_model=ResultPage)
async def list_results(
    request: Request,
    user: Annotated[User, Depends(current_user)],
    start: From = None,
    to: To = None,
    offset: Annotated[int, Query(ge=0, le=10_000)] = 0,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
) -> ResultPage:
    """The signed-in user's recorded events in the window, by recording time then job id."""
    window = _window(start, to)
    rows = await results.list_for_owner(
        services(request).engine,
        user.tenant_id,
        window.start_ms,
        window.end_ms,
        offset=offset,
        limit=limit,
    )
    return ResultPage(
        from_=to_datetime(window.start_ms),
        to=to_datetime(window.end_ms),
        offset=offset,
        limit=limit,
        items=[
            CounterResult(
                job_id=r.job_id, quantity=r.quantity, recorded_at=to_datetime(r.recorded_at_ms)
            )
            for r in rows
        ],
    )


@router.get("/summary", response_model=Summary)
async def summary(
    request: Request,
    user: Annotated[User, Depends(current_user)],
    start: From = None,
    to: To = None,
) -> Summary:
    """The signed-in user's event count and total quantity in the window."""
    window = _window(start, to)
    count, total = await results.summary_for_owner(
        services(request).engine, user.tenant_id, window.start_ms, window.end_ms
    )
    return Summary(
        from_=to_datetime(window.start_ms),
        to=to_datetime(window.end_ms),
        count=count,
        total=total,
    )
