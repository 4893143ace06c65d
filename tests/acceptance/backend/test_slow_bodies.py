"""Slow request bodies against the real server (``serve`` under uvicorn, raw sockets): more
half-sent bodies than the concurrency limit leave everyone else served, and each of them is
answered 408 and disconnected once its body deadline passes. SQLite and PostgreSQL."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest
from caravel_samples.backend.settings import Settings

from tests.samples.backend.serving import serving

pytestmark = pytest.mark.slow  # a real server as a subprocess

LIMIT = 2
SLOW = LIMIT * 2


@pytest.fixture
def port(settings: Settings) -> Iterator[int]:
    with serving(
        settings,
        CARAVEL__LIMITS__CONCURRENCY=str(LIMIT),
        CARAVEL__LIMITS__BODY_TIMEOUT_SECONDS="1.5",
    ) as found:
        yield found


def _half_a_body(port: int, path: str) -> socket.socket:
    """A connection that sent its headers and half its declared body, then went quiet."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        "Content-Length: 200\r\n\r\n".encode("ascii")
        + b'{"email": "alice@example.com", "password": "'
    )
    return sock


def _answer(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (the socket's own timeout
    catches a server that never does)."""
    received = b""
    while part := sock.recv(65536):
        received += part
    return received


def test_slow_bodies_hold_no_slot_and_are_cut_off(port: int) -> None:
    with ExitStack() as stack:
        slow = [
            stack.enter_context(_half_a_body(port, path))
            for path in ["/auth/login"] * (SLOW - 1) + ["/notes"]
        ]
        # Their headers are in: were they inside the application, every slot would be taken.
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            for _ in range(3):
                me = http.get("/auth/me")
                assert me.status_code == 401, me.text  # not 429
                login = http.post(
                    "/auth/login", json={"email": "nobody@example.com", "password": "x"}
                )
                assert login.status_code == 401, login.text
        for sock in slow:
            answer = _answer(sock)
            assert answer.startswith(b"HTTP/1.1 408 "), answer
            assert b"connection: close" in answer.lower()
            assert b"the request body arrived too slowly" in answer
