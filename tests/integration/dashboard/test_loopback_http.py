"""The loopback-only default over real HTTP: a real uvicorn on 127.0.0.1 and raw requests, so
the Host header and the proxy markers reach the dashboard exactly as a client wrote them."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from caravel.web import dashboard
from tests.support.dashboard.server import serving

pytestmark = pytest.mark.slow  # a real server per test

PROXY_MARKERS = [
    "Forwarded: for=203.0.113.9",
    "X-Forwarded-For: 203.0.113.9",
    "X-Forwarded-Host: dashboard.example",
    "X-Forwarded-Proto: https",
    "X-Real-IP: 203.0.113.9",
    "Via: 1.1 proxy.example",
    "True-Client-IP: 203.0.113.9",
    "CF-Connecting-IP: 203.0.113.9",
    "X-Client-IP: 203.0.113.9",
    "X-Original-Forwarded-For: 203.0.113.9",
    "Client-IP: 203.0.113.9",
    "X-Cluster-Client-IP: 203.0.113.9",
    "Fastly-Client-IP: 203.0.113.9",
    "Fly-Client-IP: 203.0.113.9",
    "Akamai-Client-IP: 203.0.113.9",
    "CF-Connecting-IPv6: 2001:db8::9",
    "DO-Connecting-IP: 203.0.113.9",
    "X-Vercel-Forwarded-For: 203.0.113.9",
    "X-Forwarded: for=203.0.113.9",
    "Forwarded-For: 203.0.113.9",
    "X-Envoy-External-Address: 203.0.113.9",
    "X-Azure-ClientIP: 203.0.113.9",
    "CloudFront-Viewer-Address: 203.0.113.9:4711",
    "X-AppEngine-User-IP: 203.0.113.9",
    "X-Originating-IP: 203.0.113.9",
    "X-Remote-IP: 203.0.113.9",
    "X-Remote-Addr: 203.0.113.9",
    "X_Forwarded_For: 203.0.113.9",
]


@pytest.fixture
def port(db_url: str) -> Iterator[int]:
    with serving(dashboard(db_url)) as base:
        found = urlsplit(base).port
        assert found is not None
        yield found


def _status(port: int, *headers: str, version: str = "HTTP/1.1") -> int:
    """Send one GET /static/dashboard.css with exactly ``headers``; the answer's status."""
    request = "\r\n".join([f"GET /static/dashboard.css {version}", *headers, "Connection: close"])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request.encode("latin-1") + b"\r\n\r\n")
        received = b""
        while part := sock.recv(65536):
            received += part
    return int(received.split(b" ", 2)[1])


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "127.0.0.1:8765",
        "localhost",
        "LOCALHOST:80",
        "localhost.:1",
        "[::1]",
        "[::1]:8765",
        "[::1]:65535",
        "[0:0:0:0:0:0:0:1]",
    ],
)
def test_a_local_host_is_answered(port: int, host: str) -> None:
    assert _status(port, f"Host: {host}") == 200


@pytest.mark.parametrize(
    "host",
    [
        "[::1].evil.com",
        "[::1]evil.com",
        "[::1]:8765.evil.com",
        "127.0.0.1.evil.com",
        "localhost.evil.com",
        "[127.0.0.1]",
        "[::1",
        "::1",
        "localhost:",
        "localhost:0",
        "localhost:00080",
        "localhost:65536",
        "localhost:99999",
        "localhost:123456",
        "127.0.0.1:70000",
        "[::1]:65536",
        "[::1]:0",
        "[::1]:",
        "[::ffff:127.0.0.1]",
        "[::1%25lo]",
        "localhost:-80",
        "localhost:+80",
        "localhost:80:80",
        "localhost:http",
        "localhost 127.0.0.1",
        "user@localhost",
        "localhost/",
        "",
    ],
)
def test_a_host_that_is_not_exactly_local_is_refused(port: int, host: str) -> None:
    assert _status(port, f"Host: {host}") in (400, 403)


def test_no_host_is_refused(port: int) -> None:
    assert _status(port, version="HTTP/1.0") == 403


@pytest.mark.parametrize("marker", PROXY_MARKERS)
def test_every_proxy_marker_is_refused(port: int, marker: str) -> None:
    assert _status(port, "Host: 127.0.0.1", marker) == 403
