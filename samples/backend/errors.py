"""How failures become responses. Bodies are always ``{"detail": ...}`` and never repeat the
rejected input (it may be a password) or an internal error text.

- invalid input (FastAPI's validation errors, normally 422) -> 400 with the field and the rule
- the queue's database unavailable or not migrated -> 503: nothing was accepted
- the application's database unavailable -> 503
"""

from __future__ import annotations

import logging
from typing import Any

import sqlalchemy as sa
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from caravel import SchemaNotReadyError, StoreError

logger = logging.getLogger("caravel_samples.backend")


def _field(loc: Any) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header", "cookie")]
    return ".".join(parts) or "body"


def _message(error: Any) -> str:
    return str(error.get("msg", "is invalid")).removeprefix("Value error, ")


async def invalid_request(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    problems = sorted(
        {f"{_field(e.get('loc', ()))}: {_message(e)}" for e in exc.errors()},
    )
    return JSONResponse({"detail": "invalid request: " + "; ".join(problems)}, status_code=400)


async def queue_unavailable(request: Request, exc: Exception) -> JSONResponse:
    logger.error("queue unavailable: %s", type(exc).__name__)
    return JSONResponse(
        {"detail": "the queue is unavailable; nothing was accepted, try again later"},
        status_code=503,
        headers={"Retry-After": "5"},
    )


async def database_unavailable(request: Request, exc: Exception) -> JSONResponse:
    logger.error("database error: %s", type(exc).__name__)
    return JSONResponse(
        {"detail": "the database is unavailable; try again later"},
        status_code=503,
        headers={"Retry-After": "5"},
    )


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(StoreError, queue_unavailable)
    app.add_exception_handler(SchemaNotReadyError, queue_unavailable)
    app.add_exception_handler(sa.exc.SQLAlchemyError, database_unavailable)
