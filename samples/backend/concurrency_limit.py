"""A pure ASGI middleware that admits at most ``limit`` requests into the application at once,
with no waiting queue: one more is answered 429 with ``Retry-After`` straight away.

The count is per process. Paths in ``exempt_paths`` (the health probes) are never counted or
refused.
"""

from __future__ import annotations

from collections.abc import Iterable

from caravel_samples.backend.asgi import send_json
from starlette.types import ASGIApp, Receive, Scope, Send

RETRY_AFTER_SECONDS = 1
TOO_MANY = {"detail": "too many requests; try again later"}


class ConcurrencyLimitMiddleware:
    def __init__(self, app: ASGIApp, *, limit: int, exempt_paths: Iterable[str] = ()) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.app = app
        self.limit = limit
        self.exempt_paths = frozenset(exempt_paths)
        self.active = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.exempt_paths:
            await self.app(scope, receive, send)
            return
        if self.active >= self.limit:
            retry = str(RETRY_AFTER_SECONDS).encode("ascii")
            await send_json(send, 429, TOO_MANY, [(b"retry-after", retry)])
            return
        self.active += 1  # no await between the check and this: no other request can slip in
        try:
            await self.app(scope, receive, send)
        finally:
            self.active -= 1
