"""A pure ASGI middleware that caps request bodies (16 KiB by default).

- A request that declares a larger ``Content-Length`` is answered 413 at once: the application
  is never called and not a byte of the body is read.
- A body without a declared length (chunked) is counted as it arrives; the moment it passes the
  limit, reading stops and the answer is 413, whatever the application was about to say.

Both answers ask the server to close the connection, since the rest of the body was never read.
"""

from __future__ import annotations

from caravel_samples.backend.asgi import send_json
from starlette.types import ASGIApp, Message, Receive, Scope, Send

DEFAULT_MAX_BYTES = 16 * 1024

_CLOSE = [(b"connection", b"close")]


class BodyTooLargeError(Exception):
    """Raised from ``receive`` once the body passes the limit; never reaches a client."""


def _declared_length(scope: Scope) -> int | None:
    """The Content-Length header as an integer, ``None`` without one, ``-1`` when invalid."""
    values = [v for k, v in scope.get("headers", ()) if k.lower() == b"content-length"]
    if not values:
        return None
    if len(set(values)) != 1 or not values[0].isdigit():
        return -1
    return int(values[0])


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def _too_large(self, send: Send) -> None:
        detail = f"the request body is larger than {self.max_bytes} bytes"
        await send_json(send, 413, {"detail": detail}, _CLOSE)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _declared_length(scope)
        if declared == -1:
            await send_json(send, 400, {"detail": "invalid Content-Length header"}, _CLOSE)
            return
        if declared is not None and declared > self.max_bytes:
            await self._too_large(send)
            return

        received = 0
        exceeded = False
        started = False
        answered = False

        async def limited_receive() -> Message:
            nonlocal received, exceeded
            if exceeded:
                raise BodyTooLargeError
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    exceeded = True
                    raise BodyTooLargeError
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started, answered
            if exceeded and not started:
                # Whatever the application answers to the cut-off body (often a 400 for
                # "could not parse"), the client gets the 413 instead, once.
                if not answered:
                    answered = True
                    await self._too_large(send)
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except Exception:
            if not exceeded:
                raise
        if exceeded and not started and not answered:
            await self._too_large(send)
