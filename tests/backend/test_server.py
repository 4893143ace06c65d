"""The real thing: ``migrate``, ``users create`` and ``serve`` as subprocesses, with uvicorn on a
loopback port. Checks the body limit on real sockets (a declared oversized Content-Length and a
chunked body), a sign-in with the real Argon2 parameters, and a clean SIGTERM. SQLite and
PostgreSQL."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import httpx
import pytest
from caravel_samples.backend.settings import Settings

from tests.backend.serving import REAL_PASSWORD, command, serving, sign_in_over_http
from tests.backend.test_limits import padded_event

LIMIT = 16 * 1024


@pytest.fixture
def server(settings: Settings) -> Iterator[int]:
    with serving(settings) as port:
        yield port


def _raw(port: int, data: bytes) -> tuple[int, dict[str, str]]:
    """Send ``data`` in one write, read until the server closes; the status and headers."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        received = b""
        while b"\r\n\r\n" not in received:
            part = sock.recv(65536)
            if not part:
                break
            received += part
        head = received.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
        # The server hangs up: nothing more will be read from this connection.
        sock.settimeout(10)
        while sock.recv(65536):
            pass
    status = int(head[0].split()[1])
    headers = dict(line.split(": ", 1) for line in head[1:])
    return status, {k.lower(): v for k, v in headers.items()}


def test_the_served_application_end_to_end(settings: Settings, server: int) -> None:
    created = command(
        settings, "users", "create", "--email", "alice@example.com", stdin=REAL_PASSWORD + "\n"
    )
    assert created.returncode == 0, created.stderr
    assert REAL_PASSWORD not in created.stdout + created.stderr
    short = command(settings, "users", "create", "--email", "bob@example.com", stdin="short\n")
    assert short.returncode == 2
    assert "at least 12 characters" in short.stderr
    again = command(
        settings, "users", "create", "--email", "alice@example.com", stdin=REAL_PASSWORD
    )
    assert again.returncode == 1

    port = server
    # A declared Content-Length over the limit: 413 at once, without sending the body at all,
    # before the session is even looked at.
    status, headers = _raw(
        port,
        b"POST /counter/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: 1048576\r\n\r\n",
    )
    assert status == 413
    assert headers["connection"] == "close"

    signed_in = sign_in_over_http(port, "alice@example.com", REAL_PASSWORD)
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
        headers = {**signed_in, "Content-Type": "application/json"}
        fits = http.post(
            "/counter/events",
            content=padded_event(LIMIT),
            headers={**headers, "Idempotency-Key": "fits"},
        )
        assert fits.status_code == 202
        too_big = http.post(
            "/counter/events",
            content=padded_event(LIMIT + 1),
            headers={**headers, "Idempotency-Key": "too-big"},
        )
        assert too_big.status_code == 413
        # A chunked body is cut off once it passes the limit.
        signed = "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode("latin-1")
        request = (
            b"POST /counter/events HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            b"Idempotency-Key: chunked\r\n" + signed + b"Transfer-Encoding: chunked\r\n\r\n"
        )
        chunk = b"400\r\n" + b" " * 1024 + b"\r\n"
        status, answer = _raw(port, request + chunk * 20 + b"0\r\n\r\n")
        assert status == 413
        assert answer["connection"] == "close"
        # A small chunked body goes through.
        small = b'{"quantity": 5}'
        status, _ = _raw(
            port,
            request + f"{len(small):x}\r\n".encode() + small + b"\r\n0\r\n\r\n",
        )
        assert status == 202

        job = http.get(fits.headers["location"], headers=signed_in)
        assert job.json()["state"] == "ready"  # no worker in this process
        assert http.get("/health/ready").text == "Healthy"
