"""The one guard every request passes before a page runs.

It finds who is asking (the host application's ``authorize``, or the loopback-only rule without
it), checks the route's permission, reads and checks a POST's form and anti-forgery token, and
answers a database that is not migrated or not answering with a page instead of a traceback.
A refused request reaches no page, so it reads and changes nothing.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Literal
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Scope

from caravel.errors import PrincipalTypeError, SchemaNotReadyError, StoreError
from caravel.web.auth import LOCAL_OPERATOR, Authorize, Principal, principal_of, refusal_reason
from caravel.web.csrf import COOKIE, FIELD, CsrfSigner
from caravel.web.presentation import Renderer

__all__ = ["MAX_FORM_BYTES", "Guard", "Handler", "Need", "Refusal"]

#: What a route needs: nothing, :attr:`Principal.can_read`, or that and
#: :attr:`Principal.can_operate`.
Need = Literal["public", "read", "operate"]
Handler = Callable[[Request], Awaitable[Response]]

#: The largest form body a POST may carry.
MAX_FORM_BYTES = 8 * 1024


class Refusal(Exception):
    """Stop handling a request and answer with ``response`` (raised by the guard, and by a page
    that finds nothing to show)."""

    def __init__(self, response: Response) -> None:
        self.response = response


def _route_path(scope: Scope) -> str:
    """The path below the dashboard's mount point."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


class Guard:
    """Who is asking, and whether they may: for every request, before any page."""

    def __init__(self, authorize: Authorize | None, signer: CsrfSigner, view: Renderer) -> None:
        self._authorize = authorize
        self._signer = signer
        self._view = view

    async def identify(self, request: Request) -> Principal | None:
        """The principal making the request (``None``: anonymous). Without ``authorize`` a
        request that is not local raises :class:`Refusal`; static files never ask
        ``authorize``, so a slow sign-in does not hold up the stylesheet."""
        if self._authorize is None:
            reason = refusal_reason(request)
            if reason is not None:
                raise Refusal(self._view.refused(reason))
            return LOCAL_OPERATOR
        if _route_path(request.scope).startswith("/static/"):
            return None
        found = self._authorize(request)
        if inspect.isawaitable(found):
            found = await found
        if found is not None and not isinstance(found, Principal):
            raise PrincipalTypeError
        return found

    def protect(self, needs: Need, method: str, handler: Handler) -> Handler:
        """``handler`` behind the permission check (and, for a POST, the form check), with
        refusals and database failures answered as pages."""

        async def endpoint(request: Request) -> Response:
            try:
                principal = self._permitted(request, needs)
                if method == "POST":
                    # No route takes a POST without a permission, so someone is signed in.
                    assert principal is not None
                    request.state.form = await self._checked_form(request, principal)
                return await handler(request)
            except Refusal as refusal:
                return refusal.response
            except SchemaNotReadyError:
                return self._view.error(
                    request,
                    503,
                    "The queue is not migrated",
                    "The queue database is not at the library's newest migration. Run "
                    "caravel db upgrade.",
                )
            except StoreError as exc:
                return self._view.error(
                    request,
                    503,
                    "The database did not answer",
                    f"The queue database failed ({type(exc).__name__}: {exc}). The page will "
                    "try again.",
                )

        return endpoint

    def _permitted(self, request: Request, needs: Need) -> Principal | None:
        principal = principal_of(request)
        if needs == "public":
            return principal
        if principal is None:
            raise Refusal(
                self._view.error(
                    request,
                    401,
                    "Sign in first",
                    "This dashboard needs to know who you are. Sign in to the application "
                    "that serves it, then come back.",
                )
            )
        if not (principal.can_read and (needs == "read" or principal.can_operate)):
            raise Refusal(
                self._view.error(
                    request,
                    403,
                    "Not allowed",
                    "Your account may not replay, cancel or delete jobs."
                    if needs == "operate" and principal.can_read
                    else "Your account may not use this dashboard.",
                )
            )
        return principal

    async def _checked_form(self, request: Request, principal: Principal) -> dict[str, str]:
        """The POST's form fields, once its type, size, shape and anti-forgery token hold."""
        media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
        if media != "application/x-www-form-urlencoded":
            raise self._bad_form(request, 415, "Unsupported form", "Send an HTML form.")
        declared = request.headers.get("content-length", "0")
        if not declared.isdigit() or int(declared) > MAX_FORM_BYTES:
            raise self._bad_form(request, 413, "Form too large", "The form is too large.")
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FORM_BYTES:  # a body longer than it declared
                raise self._bad_form(request, 413, "Form too large", "The form is too large.")
        try:
            pairs = parse_qsl(
                body.decode("utf-8"),
                keep_blank_values=True,
                max_num_fields=32,
                strict_parsing=False,
            )
        except (UnicodeDecodeError, ValueError):
            pairs = None
        # A repeated field is refused: which of its values counts would be a guess.
        if pairs is None or len({name for name, _ in pairs}) != len(pairs):
            raise self._bad_form(request, 400, "Bad form", "The form could not be read.")
        form = dict(pairs)
        if not self._signer.valid(request.cookies.get(COOKIE), principal.name, form.get(FIELD)):
            raise self._bad_form(
                request,
                403,
                "The form has expired",
                "This form's anti-forgery token is missing or not valid for you. Load the page "
                "again and repeat the action.",
            )
        return form

    def _bad_form(self, request: Request, status: int, heading: str, message: str) -> Refusal:
        return Refusal(self._view.error(request, status, heading, message))
