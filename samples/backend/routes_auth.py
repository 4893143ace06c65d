"""Sign-in, sign-out, session revocation, antiforgery tokens and (when enabled) registration.

Every wrong credential gets the same 401, and sign-in attempts share one fixed window whose
refusal (429) is the same for every account, so neither reveals whether an email is registered.
Registration, when enabled, answers 204 whether or not the address was free, for the same reason.
"""

from __future__ import annotations

import contextlib
from typing import Annotated

from caravel_samples.backend import accounts, security
from caravel_samples.backend.accounts import User
from caravel_samples.backend.guards import (
    SignedInRoute,
    SignInRoute,
    current_user,
    presented_session,
    services,
    session_token,
)
from caravel_samples.backend.models import CsrfToken, LoginRequest, Me, Problem, RegisterRequest
from caravel_samples.backend.services import Services
from fastapi import APIRouter, Depends, HTTPException, Request, Response

sign_in = APIRouter(prefix="/auth", tags=["auth"], route_class=SignInRoute)
#: Included only when CARAVEL__ALLOW_REGISTRATION is true; otherwise the path does not exist.
registration = APIRouter(prefix="/auth", tags=["auth"], route_class=SignInRoute)
signed_in = APIRouter(prefix="/auth", tags=["auth"], route_class=SignedInRoute)

INVALID_CREDENTIALS = "invalid email or password"


def _set_session_cookie(response: Response, backend: Services, token: str) -> None:
    response.set_cookie(
        backend.settings.session_cookie,
        token,
        max_age=int(backend.session_lifetime.total_seconds()),
        path="/",
        secure=backend.settings.secure_cookies,
        httponly=True,
        samesite="strict",
    )


def _clear_session_cookie(response: Response, backend: Services) -> None:
    response.delete_cookie(
        backend.settings.session_cookie,
        path="/",
        secure=backend.settings.secure_cookies,
        httponly=True,
        samesite="strict",
    )


@sign_in.post(
    "/login",
    status_code=204,
    response_class=Response,
    responses={401: {"model": Problem, "description": "Wrong email or password"}},
)
async def login(body: LoginRequest, request: Request) -> Response:
    """Sign in with email and password; the answer sets a new session cookie."""
    backend = services(request)
    email = body.email.strip().lower()
    user = await accounts.authenticate(backend.engine, email, body.password)
    if user is None:
        raise HTTPException(401, INVALID_CREDENTIALS)
    token = await accounts.start_session(
        backend.engine, user, backend.session_lifetime, replacing=presented_session(request)
    )
    response = Response(status_code=204)
    _set_session_cookie(response, backend, token)
    return response


@registration.post("/register", status_code=204, response_class=Response)
async def register(body: RegisterRequest, request: Request) -> Response:
    """Create an account (only when CARAVEL__ALLOW_REGISTRATION is true). The answer is the
    same whether or not the address was already registered; sign in to continue."""
    backend = services(request)
    # A taken address gets the same answer as a new account: registration reveals nothing.
    with contextlib.suppress(accounts.EmailTakenError):
        await accounts.create_user(backend.engine, body.email, body.password)
    return Response(status_code=204)


@signed_in.post("/logout", status_code=204, response_class=Response)
async def logout(request: Request) -> Response:
    """End this session."""
    backend = services(request)
    await accounts.end_session(backend.engine, session_token(request))
    response = Response(status_code=204)
    _clear_session_cookie(response, backend)
    return response


@signed_in.post("/sessions/revoke", status_code=204, response_class=Response)
async def revoke_sessions(
    request: Request, user: Annotated[User, Depends(current_user)]
) -> Response:
    """End every session of the signed-in user, on every device, this one included."""
    backend = services(request)
    await accounts.revoke_sessions(backend.engine, user)
    response = Response(status_code=204)
    _clear_session_cookie(response, backend)
    return response


@signed_in.get("/csrf", response_model=CsrfToken)
async def csrf(request: Request, response: Response) -> CsrfToken:
    """A fresh antiforgery token for this session: send it as the RequestVerificationToken
    header on every POST and DELETE."""
    response.headers["Cache-Control"] = "no-store"
    return CsrfToken(token=security.new_csrf_token(session_token(request)))


@signed_in.get("/me", response_model=Me)
async def me(user: Annotated[User, Depends(current_user)]) -> Me:
    """Who is signed in."""
    return Me(
        id=user.id,
        email=user.email,
        operator=user.is_operator,
        permissions=sorted(user.permissions),
    )
