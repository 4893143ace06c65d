"""Small helpers for the pure ASGI middleware: answer a request with a JSON body."""

from __future__ import annotations

import json
from collections.abc import Sequence

from starlette.types import Send


async def send_json(
    send: Send, status: int, body: dict[str, str], headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    payload = json.dumps(body, separators=(",", ":")).encode("utf-8")
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode("ascii")),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload, "more_body": False})
