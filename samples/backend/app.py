"""The application factory: ``create_app(settings)`` builds the FastAPI app.

Requests pass, from the outside in: the response hardening (``hardening.py``: nosniff,
no-store, relative redirects), the body limit (413), the body deadline (the whole body is read
first, 408 when it is too slow, so a slow client holds no slot), the concurrency limit (429; the
health probes are exempt), then routing, where each route class checks its session,
antiforgery token or sign-in window before the endpoint parses the body. Resources are opened
when the app starts (its lifespan) and released when it stops; nothing creates a database or a
table.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from caravel_samples.backend import (
    errors,
    health,
    observability,
    ops,
    routes_auth,
    routes_counter,
    routes_jobs,
    routes_notes,
)
from caravel_samples.backend.body_deadline import BodyDeadlineMiddleware
from caravel_samples.backend.body_limit import BodyLimitMiddleware
from caravel_samples.backend.concurrency_limit import ConcurrencyLimitMiddleware
from caravel_samples.backend.hardening import HardeningMiddleware
from caravel_samples.backend.services import Services
from caravel_samples.backend.settings import Settings
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from caravel import Clock

MAX_BODY_BYTES = 16 * 1024


def _openapi_with_400(app: FastAPI) -> dict[str, Any]:
    """The generated schema, with FastAPI's validation answer (422) renamed to the 400 this
    application sends."""
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
        for path in schema.get("paths", {}).values():
            for operation in path.values():
                responses = operation.get("responses", {})
                if "422" in responses:
                    invalid = responses.pop("422")
                    invalid["description"] = "Invalid input"
                    responses.setdefault("400", invalid)
        app.openapi_schema = schema
    return app.openapi_schema


def create_app(settings: Settings, *, clock: Clock | None = None) -> FastAPI:
    """Build the application. ``clock`` replaces the queue's clock (tests move time by hand)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        services = Services(settings, clock=clock)
        app.state.services = services
        if settings.run_worker:
            services.start_worker()
        try:
            yield
        finally:
            await services.close()
            await dashboard.close()

    app = FastAPI(
        title="Caravel backend sample",
        version="0.1.0",
        summary="Sign-in, notes and a durable counter queue on Caravel.",
        lifespan=lifespan,
        # The interactive pages load Swagger UI and ReDoc from a CDN: a third-party script in
        # the API's own origin, where the session cookie lives. Development only.
        docs_url="/docs" if settings.api_docs else None,
        redoc_url="/redoc" if settings.api_docs else None,
    )
    errors.install(app)
    app.include_router(health.router)
    app.include_router(routes_auth.sign_in)
    if settings.allow_registration:
        app.include_router(routes_auth.registration)
    app.include_router(routes_auth.signed_in)
    app.include_router(routes_notes.router)
    app.include_router(routes_counter.router)
    app.include_router(routes_jobs.router)
    app.include_router(observability.router)
    # The operations dashboard, for operators (mounted apps get no lifespan: closed above).
    dashboard = ops.create_ops(app, settings.database_url, clock=clock)
    app.mount(ops.PATH, dashboard)
    # add_middleware puts each new layer outside the previous one: the body limit is outermost.
    app.add_middleware(
        ConcurrencyLimitMiddleware,
        limit=settings.limits.concurrency,
        exempt_paths=health.PATHS,
    )
    app.add_middleware(
        BodyDeadlineMiddleware,
        timeout=settings.limits.body_timeout_seconds,
        min_rate=settings.limits.body_min_bytes_per_second,
        grace=settings.limits.body_grace_seconds,
    )
    app.add_middleware(BodyLimitMiddleware, max_bytes=MAX_BODY_BYTES)
    app.add_middleware(HardeningMiddleware)
    app.openapi = lambda: _openapi_with_400(app)  # type: ignore[method-assign]
    return app
