"""Health probes, answered before authentication and outside every limiter.

``/health/live`` says the process can answer; it touches no database. ``/health/ready`` opens
the database read-only, reads at most one row from each table the application needs (naming the
columns it uses, so a missing column fails too) and gives up after five seconds. It does not
insist on the newest migration: a database migrated ahead of this version of the application
(during a rolling deployment) stays ready as long as what this version reads is there. Either
answers only ``Healthy`` (200) or ``Unhealthy`` (503), without details; neither creates a
database, a table or a row.
"""

from __future__ import annotations

import asyncio
import logging

import sqlalchemy as sa
from caravel_samples.backend.guards import services
from caravel_samples.backend.services import READY_TIMEOUT_SECONDS
from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse
from sqlalchemy.ext.asyncio import AsyncEngine

router = APIRouter(prefix="/health", tags=["health"])
logger = logging.getLogger("caravel_samples.backend")

PATHS = ("/health/live", "/health/ready")

#: Every table the application reads or writes, with the columns it relies on.
REQUIRED: dict[str, tuple[str, ...]] = {
    "users": ("id", "email", "password_hash", "is_operator", "created_at"),
    "sessions": ("id", "user_id", "created_at", "expires_at"),
    "notes": ("id", "owner_id", "text", "created_at"),
    "counter_results": ("job_id", "owner_id", "quantity", "recorded_at"),
    "caravel_jobs": (
        "id",
        "queue",
        "job_type",
        "tenant_id",
        "idempotency_key",
        "payload",
        "state",
        "attempt",
        "max_attempts",
        "due_at",
        "created_at",
        "updated_at",
        "started_at",
        "finished_at",
        "last_failure",
    ),
}


def _answer(healthy: bool) -> PlainTextResponse:
    return PlainTextResponse(
        "Healthy" if healthy else "Unhealthy",
        status_code=200 if healthy else 503,
        headers={"Cache-Control": "no-store"},
    )


async def _read_everything(engine: AsyncEngine) -> bool:
    async with engine.connect() as conn:
        for table, columns in REQUIRED.items():
            listed = ", ".join(columns)
            await conn.execute(sa.text(f"SELECT {listed} FROM {table} LIMIT 1"))
        await conn.rollback()
    return True


@router.get("/live", response_class=PlainTextResponse)
async def live() -> PlainTextResponse:
    """The process is up."""
    return _answer(True)


#: Checks that outlived their deadline, still unwinding (a blocked driver call cannot always be
#: interrupted at once). Kept here so they are not garbage-collected mid-way.
_abandoned: set[asyncio.Task[bool]] = set()


def _forget(task: asyncio.Task[bool]) -> None:
    _abandoned.discard(task)
    if not task.cancelled() and task.exception() is not None:
        logger.warning("readiness check failed late: %s", type(task.exception()).__name__)


@router.get(
    "/ready",
    response_class=PlainTextResponse,
    responses={503: {"description": "Unhealthy"}},
)
async def ready(request: Request) -> PlainTextResponse:
    """The database answers and holds every table and column the application needs."""
    check = asyncio.create_task(_read_everything(services(request).probe_engine))
    done, _ = await asyncio.wait({check}, timeout=READY_TIMEOUT_SECONDS)
    if not done:
        # Answer at the deadline; the check unwinds in the background.
        logger.warning("readiness check timed out after %.0f s", READY_TIMEOUT_SECONDS)
        check.cancel()
        _abandoned.add(check)
        check.add_done_callback(_forget)
        return _answer(False)
    error = check.exception()
    if error is not None:  # any failure is simply "Unhealthy"; the reason goes to the log
        logger.warning("readiness check failed: %s", type(error).__name__)
        return _answer(False)
    return _answer(check.result())
