"""The operations dashboard at ``/ops``, for operators only.

``caravel.web.dashboard`` is mounted inside the FastAPI application and asks :func:`authorize`
who each request comes from: the signed-in account of the session cookie. Operators (accounts
created with ``users create --operator``) read every page, see payloads and replay dead letters;
other signed-in accounts are refused (403) and requests without a live session get 401. Replays
are POST forms carrying the dashboard's own anti-forgery token.
"""

from __future__ import annotations

from caravel_samples.backend import accounts
from caravel_samples.backend.guards import presented_session
from fastapi import FastAPI
from starlette.requests import Request

from caravel import Clock
from caravel.web import Dashboard, Principal, dashboard

PATH = "/ops"


def create_ops(app: FastAPI, database_url: str, *, clock: Clock | None = None) -> Dashboard:
    """The dashboard over the application's queue, deciding access from ``app``'s sessions."""

    async def authorize(request: Request) -> Principal | None:
        token = presented_session(request, app.state.services)
        if token is None:
            return None
        user = await accounts.session_user(app.state.services.engine, token)
        if user is None:
            return None
        if not user.is_operator:
            return Principal(user.email, can_read=False)
        return Principal.operator(user.email)

    return dashboard(database_url, authorize=authorize, title="Caravel backend", clock=clock)
