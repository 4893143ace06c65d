"""The real thing: ``migrate``, ``users create`` and ``serve`` as subprocesses, with uvicorn on a
loopback port. Checks the body limit on real sockets (a declared oversized Content-Length and a
chunked body), a sign-in with the real Argon2 parameters, and a clean SIGTERM. SQLite and
PostgreSQL."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from caravel_samples.backend.settings import Settings
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from tests.samples.backend.serving import REAL_PASSWORD, command, serving, sign_in_over_http
from tests.samples.backend.test_limits import padded_event
from tests.support.processes import wait_until

pytestmark = pytest.mark.slow  # the sample's commands as subprocesses, a real uvicorn

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


class _Collector(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver on loopback: keeps every export request the server sends."""

    received: list[tuple[str, str, bytes]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((self.path, self.headers["Content-Type"], body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[tuple[int, list[tuple[str, str, bytes]]]]:
    received: list[tuple[str, str, bytes]] = []
    handler = type("Handler", (_Collector,), {"received": received})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], received
    finally:
        server.shutdown()
        server.server_close()


def _spans(received: list[tuple[str, str, bytes]]) -> list[tuple[str, Any, dict[str, str]]]:
    """(service name, span, string attributes) of every span exported so far."""
    found = []
    for path, content_type, body in list(received):
        assert path == "/v1/traces"
        assert content_type == "application/x-protobuf"
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    attributes = {a.key: a.value.string_value for a in span.attributes}
                    found.append((resource["service.name"], span, attributes))
    return found


def test_operators_read_prometheus_metrics_and_traces_go_to_the_otlp_collector(
    settings: Settings, collector: tuple[int, list[tuple[str, str, bytes]]]
) -> None:
    otlp_port, received = collector
    for email, flags in (("op@example.com", ["--operator"]), ("member@example.com", [])):
        made = command(
            settings, "users", "create", "--email", email, *flags, stdin=REAL_PASSWORD + "\n"
        )
        assert made.returncode == 0, made.stderr
    with serving(
        settings,
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{otlp_port}",
        OTEL_BSP_SCHEDULE_DELAY="100",
        OTEL_SERVICE_NAME="backend-under-test",
    ) as port:
        operator = sign_in_over_http(port, "op@example.com", REAL_PASSWORD)
        member = sign_in_over_http(port, "member@example.com", REAL_PASSWORD)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http_client:
            assert http_client.get("/metrics").status_code == 401
            refused = http_client.get("/metrics", headers=member)
            assert refused.status_code == 403
            assert "metrics.read" in refused.json()["detail"]

            event = {**member, "Content-Type": "application/json", "Idempotency-Key": "m-1"}
            for _ in range(2):  # the second is a replay of the first
                sent = http_client.post("/counter/events", json={"quantity": 3}, headers=event)
                assert sent.status_code in (200, 202), sent.text
            job_id = sent.headers["location"].rsplit("/", 1)[1]

            scraped = http_client.get("/metrics", headers=operator)
            assert scraped.status_code == 200
            assert scraped.headers["content-type"] == CONTENT_TYPE_LATEST
            families = {
                family.name: family for family in text_string_to_metric_families(scraped.text)
            }
            enqueued = {
                sample.labels["caravel_already_enqueued"]: sample.value
                for sample in families["caravel_jobs_enqueued"].samples
                if sample.name == "caravel_jobs_enqueued_total"
                and sample.labels["messaging_destination_name"] == "counter"
            }
            assert enqueued == {"false": 1.0, "true": 1.0}
            # Every value of every label is a name we chose, never a payload or a tenant.
            for family in families.values():
                for sample in family.samples:
                    assert "member@example.com" not in str(sample.labels)

        wait_until(
            lambda: any(s.name == "send counter" for _, s, _ in _spans(received)),
            what="an enqueue span to reach the collector",
            interval=0.1,
        )
    sends = [(service, a) for service, s, a in _spans(received) if s.name == "send counter"]
    assert {service for service, _ in sends} == {"backend-under-test"}
    assert {a["messaging.message.id"] for _, a in sends} == {job_id}
    assert all(a["messaging.destination.name"] == "counter" for _, a in sends)
