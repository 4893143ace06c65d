"""The real thing: ``serve`` (Werkzeug's threaded server on a loopback port) and ``worker``
(``caravel worker`` with the sample's registry) as subprocesses, a signup over real HTTP, the
worker welcoming it, and both stopped by SIGTERM with exit 0. SQLite and PostgreSQL."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any
from uuid import UUID

import httpx
import pytest
from caravel_samples.flask.settings import URL_VARIABLE, Settings

from tests.support.processes import PYTHONPATH, ROOT, wait_until

pytestmark = pytest.mark.slow  # the sample's commands as subprocesses


def _environment() -> dict[str, str]:
    """This checkout's code first; the database only from the command line."""
    env = {k: v for k, v in os.environ.items() if k != URL_VARIABLE}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PYTHONPATH, env.get("PYTHONPATH")) if p)
    return env


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def _command(*args: str) -> Iterator[tuple[subprocess.Popen[str], IO[str]]]:
    """``python -m caravel_samples.flask ARGS`` with its output in a file (a pipe nobody reads
    while it runs could fill and stall it); killed if the test leaves it running."""
    with tempfile.TemporaryFile(mode="w+", prefix="flask-sample-") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "caravel_samples.flask", *args],
            cwd=ROOT,
            env=_environment(),
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            yield process, log
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()


def _output(log: IO[str]) -> str:
    log.seek(0)
    return log.read()


def _stop(process: subprocess.Popen[str], log: IO[str]) -> str:
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=30)
    output = _output(log)
    assert process.returncode == 0, output
    return output


def _live(port: int) -> bool:
    try:
        answer = httpx.get(f"http://127.0.0.1:{port}/signups/{UUID(int=0)}", timeout=1)
    except httpx.TransportError:
        return False
    return answer.status_code == 404


def test_a_signup_over_http_is_welcomed_by_the_worker_process(settings: Settings) -> None:
    url = settings.database_url
    port = _free_port()
    with _command("serve", "--url", url, "--port", str(port)) as (server, server_log):
        wait_until(
            lambda: server.poll() is None and _live(port),
            timeout=60,
            what=f"the server to answer: {_output(server_log)}",
        )
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base, timeout=30) as http:
            created = http.post(
                "/signups", json={"email": "ann@example.com"}, headers={"Idempotency-Key": "a1"}
            )
            assert created.status_code == 201, created.text
            location = created.headers["location"]
            assert http.get(location).json()["welcome_job"]["state"] == "ready"

            with _command("worker", "--url", url) as (worker, worker_log):

                def welcomed() -> bool:
                    assert worker.poll() is None, _output(worker_log)
                    signup: dict[str, Any] = http.get(location).json()
                    return signup["welcomed_at"] is not None

                wait_until(welcomed, timeout=60, what="the worker to welcome the signup")
                assert "processing signups" in _stop(worker, worker_log)

            signup = http.get(location).json()
            assert signup["welcome_job"]["state"] == "completed"
            again = http.post(
                "/signups", json={"email": "ann@example.com"}, headers={"Idempotency-Key": "a1"}
            )
            assert again.status_code == 200
            assert again.json()["job_id"] == created.json()["job_id"]
        assert "server stopped" in _stop(server, server_log)


def test_serve_refuses_an_unmigrated_database(tmp_path: Any) -> None:
    missing = f"sqlite:///{tmp_path / 'never-migrated.db'}"
    with _command("serve", "--url", missing, "--port", str(_free_port())) as (server, log):
        server.wait(timeout=60)
        assert server.returncode == 2
        assert "error: queue:" in _output(log)
    with _command("serve", "--url", "oracle://nope") as (server, log):
        server.wait(timeout=60)
        assert server.returncode == 2
        assert "error: --url: must be a database URL" in _output(log)
