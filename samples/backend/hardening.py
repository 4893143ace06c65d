"""A pure ASGI middleware for what every answer of the API carries, whatever route made it:

- ``X-Content-Type-Options: nosniff`` on every response, so a browser never runs a JSON body
  (or an error page) as a script or a stylesheet.
- ``Cache-Control: no-store`` on every JSON response that did not choose its own caching: the
  API's answers are a signed-in user's data, and no shared or browser cache may keep them.
- A ``Location`` that points at the request's own Host is made relative (Starlette's
  trailing-slash redirect builds an absolute URL from the Host header, which a client chooses),
  so a redirect never echoes a Host back.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send


def relative_location(location: str, host: str | None) -> str:
    """``location`` without its scheme and authority when they name ``host`` (or any
    authority at all with no Host to compare); other locations are returned unchanged."""
    parts = urlsplit(location)
    if not parts.netloc or (host is not None and parts.netloc.lower() != host.lower()):
        return location
    return urlunsplit(("", "", parts.path or "/", parts.query, parts.fragment))


class HardeningMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = Headers(scope=scope).get("host")

        async def hardened(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers.setdefault("x-content-type-options", "nosniff")
                media = headers.get("content-type", "").partition(";")[0].strip().lower()
                if media == "application/json":
                    headers.setdefault("cache-control", "no-store")
                if "location" in headers:
                    headers["location"] = relative_location(headers["location"], host)
            await send(message)

        await self.app(scope, receive, hardened)
