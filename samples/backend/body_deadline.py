"""A pure ASGI middleware that reads each request's whole body before the request goes any
further, under a deadline and a minimum rate, so a slow client never holds a concurrency slot.

Without it, 32 connections that each send half a body sit inside the application waiting for
the rest, filling the concurrency limit: everyone else, sign-in included, gets 429 for as long
as those clients care to wait. Here, the body is read first (the body limit outside this layer
caps it at 16 KiB, so buffering it is cheap) and handed to the application in one piece; only
then does the request take a slot. A body that is not complete within ``timeout`` seconds, or
that falls below ``min_rate`` bytes per second once a grace period has passed, is answered
``408 Request Timeout`` and the connection is closed.

The time rules are in :class:`ReadBudget`, which reads an injected clock; the waiting itself is
the event loop's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from caravel_samples.backend.asgi import send_json
from starlette.types import ASGIApp, Message, Receive, Scope, Send

DEFAULT_TIMEOUT_SECONDS = 10.0
DEFAULT_MIN_RATE = 1024
#: The minimum rate applies only after this long: a body's first bytes may lag its headers,
#: by more than a second when the client opens many connections at once on a busy machine.
GRACE_SECONDS = 5.0
TOO_SLOW = {"detail": "the request body arrived too slowly"}

_CLOSE = [(b"connection", b"close")]


@dataclass(frozen=True, slots=True)
class ReadBudget:
    """When a body being read is too slow: not complete ``timeout`` seconds after ``started``,
    or, after ``grace`` seconds, fewer than ``min_rate`` bytes per second on average."""

    started: float
    timeout: float
    min_rate: float
    grace: float = GRACE_SECONDS

    def seconds_left(self, now: float, received: int) -> float:
        """How long the next part of the body may take to arrive (``<= 0``: too slow now).
        By time ``t`` the rate rule wants ``min_rate * (t - grace)`` bytes, so with
        ``received`` bytes in hand the next ones are due by ``grace + received / min_rate``."""
        by_rate = self.grace + received / self.min_rate
        return min(self.timeout, by_rate) - (now - self.started)


class BodyDeadlineMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        min_rate: float = DEFAULT_MIN_RATE,
        grace: float = GRACE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app = app
        self.timeout = timeout
        self.min_rate = min_rate
        self.grace = grace
        self.clock = clock

    async def _read(self, receive: Receive) -> list[Message] | None:
        """Every message of the body, or ``None`` when it was too slow."""
        budget = ReadBudget(self.clock(), self.timeout, self.min_rate, self.grace)
        messages: list[Message] = []
        received = 0
        while True:
            left = budget.seconds_left(self.clock(), received)
            if left <= 0:
                return None
            try:
                message = await asyncio.wait_for(receive(), left)
            except TimeoutError:
                return None
            messages.append(message)
            if message["type"] != "http.request":
                return messages  # the client went away: let the application see it
            received += len(message.get("body", b""))
            if not message.get("more_body", False):
                return messages

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        messages = await self._read(receive)
        if messages is None:
            await send_json(send, 408, TOO_SLOW, _CLOSE)
            return

        async def replay() -> Message:
            # The buffered body first, then the server's own messages (a disconnect).
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)
