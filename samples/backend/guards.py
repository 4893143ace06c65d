"""Checks that run before an endpoint reads its request body: route classes for FastAPI.

``SignedInRoute`` finds the session from its cookie (401 without a live one) and, for every
state-changing method, checks the ``RequestVerificationToken`` header against that session (403
otherwise). ``SignInRoute`` takes a permit from the sign-in window (429 when it is used up).
Both refuse before the body is parsed and before any work, so a refused request changes
nothing and reveals nothing about its content.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any, cast

from caravel_samples.backend import accounts, security
from caravel_samples.backend.accounts import User
from caravel_samples.backend.services import Services
from fastapi import Depends, Header, HTTPException, Request, Response, Security
from fastapi.routing import APIRoute
from fastapi.security import APIKeyCookie

#: The session cookie's name with Secure cookies (the default); ``Settings.session_cookie``
#: gives the name in use.
SESSION_COOKIE = "__Host-caravel_session"
CSRF_HEADER = "RequestVerificationToken"
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
MAX_COOKIE_CHARS = 128

TOO_MANY_REQUESTS = "too many requests; try again later"

_session_cookie = APIKeyCookie(
    name=SESSION_COOKIE,
    auto_error=False,
    description="The session cookie set by POST /auth/login.",
)

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


def services(request: Request) -> Services:
    return cast(Services, request.app.state.services)


def current_user(request: Request) -> User:
    """The signed-in user (only on routes of :class:`SignedInRoute`)."""
    return cast(User, request.state.user)


def presented_session(request: Request, backend: Services | None = None) -> str | None:
    """The session cookie's value, when it is plausible enough to look up. ``backend``: the
    application's services, for a request of a mounted app (``request.app`` is not ours)."""
    name = (backend or services(request)).settings.session_cookie
    token = request.cookies.get(name)
    if token and len(token) <= MAX_COOKIE_CHARS and token.isascii():
        return token
    return None


def session_token(request: Request) -> str:
    return cast(str, request.state.session_token)


async def _document_session(_: Annotated[str | None, Security(_session_cookie)]) -> None:
    """Documents the session cookie in the OpenAPI schema; the route class checks it."""


async def _document_csrf(
    _: Annotated[
        str | None,
        Header(
            alias=CSRF_HEADER,
            description="The antiforgery token from GET /auth/csrf for this session.",
        ),
    ] = None,
) -> None:
    """Documents the antiforgery header in the OpenAPI schema; the route class checks it."""


async def authorize(request: Request) -> None:
    """Raise 401 without a live session, 403 without a valid antiforgery token on a
    state-changing request; otherwise remember the user on the request."""
    token = presented_session(request)
    user = None
    if token is not None:
        user = await accounts.session_user(services(request).engine, token)
    if user is None or token is None:
        raise HTTPException(401, "sign in first")
    if request.method in STATE_CHANGING:
        presented = request.headers.getlist(CSRF_HEADER)
        if len(presented) != 1 or not security.csrf_token_valid(token, presented[0]):
            raise HTTPException(403, f"missing or invalid {CSRF_HEADER} header")
    request.state.user = user
    request.state.session_token = token


class SignedInRoute(APIRoute):
    """A route for signed-in users; state-changing methods also need the antiforgery token."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        methods = {m.upper() for m in kwargs.get("methods") or ("GET",)}
        documented = [Depends(_document_session)]
        if methods & STATE_CHANGING:
            documented.append(Depends(_document_csrf))
        kwargs["dependencies"] = [*(kwargs.get("dependencies") or ()), *documented]
        responses = dict(kwargs.get("responses") or {})
        responses.setdefault(401, {"description": "No live session"})
        if methods & STATE_CHANGING:
            responses.setdefault(403, {"description": "Missing or invalid antiforgery token"})
        kwargs["responses"] = responses
        super().__init__(path, endpoint, **kwargs)

    def get_route_handler(self) -> Handler:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            await authorize(request)
            return await handler(request)

        return guarded


class SignInRoute(APIRoute):
    """A sign-in route: each request takes a permit from the shared fixed window first."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        responses = dict(kwargs.get("responses") or {})
        responses.setdefault(429, {"description": "Too many sign-in attempts; see Retry-After"})
        kwargs["responses"] = responses
        super().__init__(path, endpoint, **kwargs)

    def get_route_handler(self) -> Handler:
        handler = super().get_route_handler()

        async def limited(request: Request) -> Response:
            retry_after = services(request).login_window.acquire()
            if retry_after is not None:
                raise HTTPException(429, TOO_MANY_REQUESTS, {"Retry-After": str(retry_after)})
            return await handler(request)

        return limited
