"""The shared NATS server with JetStream, for the bridge's NATS tests.

It is found at ``CARAVEL_TEST_NATS_URL`` (default: the local server, ``nats://127.0.0.1:4222``).
When ``CI=true`` a test that needs it and cannot reach it fails; elsewhere it is skipped with the
reason. The server is shared with every other test process and checkout, so a test never uses a
fixed stream or subject: :func:`scratch_names` gives each a stream, a subject prefix and a
durable consumer of its own (the process id and a random suffix), and :func:`delete_stream`
removes the stream, its consumers with it, afterwards. Nothing here ever restarts the server
(the fault suite's :mod:`tests.faults.natsserver` runs a private one for that).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
from dataclasses import dataclass
from typing import Any, NoReturn
from urllib.parse import urlsplit

import pytest

from tests.support.databases import IN_CI

__all__ = [
    "NATS_URL",
    "ScratchNames",
    "consumer_info",
    "delete_stream",
    "nats_reachable",
    "read_stream",
    "require_nats",
    "scratch_names",
]

NATS_URL = os.environ.get("CARAVEL_TEST_NATS_URL", "nats://127.0.0.1:4222")


def nats_unavailable(reason: str, url: str = NATS_URL) -> NoReturn:
    """Fail in CI, skip elsewhere."""
    message = f"NATS with JetStream is not reachable at {url}: {reason}"
    if IN_CI:
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def nats_reachable(url: str = NATS_URL) -> str | None:
    """Why the server at ``url`` cannot be used (``None`` when it answers with JetStream on)."""
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 4222), 3) as s:
            s.settimeout(3)
            greeting = s.recv(4096)
    except OSError as exc:
        return str(exc) or type(exc).__name__
    if not greeting.startswith(b"INFO"):
        return "no INFO greeting"
    if b'"jetstream":true' not in greeting:
        return "JetStream is not enabled"
    return None


def require_nats(url: str = NATS_URL) -> str:
    """``url`` when its server answers with JetStream on; skips when not (fails under CI)."""
    reason = nats_reachable(url)
    if reason is not None:
        nats_unavailable(reason, url)
    return url


@dataclass(frozen=True)
class ScratchNames:
    """A stream, a subject prefix and a durable consumer name no one else uses."""

    stream: str
    prefix: str
    durable: str

    def subject(self, *tokens: str) -> str:
        return ".".join((self.prefix, *tokens))


def scratch_names(label: str = "test") -> ScratchNames:
    token = f"{os.getpid()}_{secrets.token_hex(4)}"
    return ScratchNames(
        stream=f"CARAVEL_{label.upper()}_{token}",
        prefix=f"caravel-{label}-{token}",
        durable=f"caravel-{label}-{token}",
    )


def delete_stream(url: str, stream: str) -> None:
    """Delete ``stream`` (and its consumers) from ``url``'s server; a missing one is fine."""

    async def delete() -> None:
        import nats
        from nats.js.errors import NotFoundError

        connection = await nats.connect(url, connect_timeout=5, allow_reconnect=False)
        try:
            with contextlib.suppress(NotFoundError):
                await connection.jetstream().delete_stream(stream)
        finally:
            await connection.close()

    asyncio.run(delete())


async def read_stream(url: str, stream: str) -> list[Any]:
    """Every message ``stream`` holds, in order (read by sequence, acknowledging nothing)."""
    import nats
    from nats.js.errors import NotFoundError

    connection = await nats.connect(url, connect_timeout=5, allow_reconnect=False)
    try:
        js = connection.jetstream()
        info = await js.stream_info(stream)
        found = []
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            with contextlib.suppress(NotFoundError):  # a deleted message leaves a gap
                found.append(await js.get_msg(stream, seq))
        return found
    finally:
        await connection.close()


async def consumer_info(url: str, stream: str, durable: str) -> Any:
    """The durable consumer's state: ``num_ack_pending``, ``num_pending``, ``config``, ..."""
    import nats

    connection = await nats.connect(url, connect_timeout=5, allow_reconnect=False)
    try:
        return await connection.jetstream().consumer_info(stream, durable)
    finally:
        await connection.close()
