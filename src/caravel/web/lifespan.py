"""The ASGI lifespan protocol for an app that runs on its own: nothing to start, and on shutdown
its ``close`` (database connections, replays) runs before the server is told it may exit."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.types import Receive, Send


async def serve_lifespan(
    receive: Receive, send: Send, close: Callable[[], Awaitable[None]]
) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await close()
            await send({"type": "lifespan.shutdown.complete"})
            return
