"""The backend's command line as real subprocesses: ``users create``, and ``serve`` (uvicorn) on a
free loopback port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from caravel_samples.backend.guards import CSRF_HEADER, SESSION_COOKIE
from caravel_samples.backend.settings import Settings

ROOT = Path(__file__).resolve().parents[3]
#: Checked with the real Argon2 parameters: the subprocesses are not patched.
REAL_PASSWORD = "a real password for the real server"


def environment(settings: Settings, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("CARAVEL__")}
    return env | {
        "CARAVEL__DATABASE_PROVIDER": settings.database_provider,
        "CARAVEL__IDENTITY_DATABASE": settings.identity_database,
        **extra,
    }


def command(settings: Settings, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "caravel_samples.backend", *args],
        cwd=ROOT,
        env=environment(settings),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def serving(settings: Settings, **extra_env: str) -> Iterator[int]:
    """``serve`` on a free loopback port; yields the port, then stops it with SIGTERM and checks
    that it shut down gracefully. Its output goes to a file (a pipe nobody reads while the
    server runs would fill up with access-log lines and stall it)."""
    port = free_port()
    with tempfile.TemporaryFile(mode="w+", prefix="backend-serve-") as log:

        def output() -> str:
            log.seek(0)
            return log.read()

        process = subprocess.Popen(
            [sys.executable, "-m", "caravel_samples.backend", "serve", "--port", str(port)],
            cwd=ROOT,
            env=environment(settings, **extra_env),
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            _wait_until_live(process, port, output)
            yield port
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)
            # uvicorn shuts down gracefully, then ends by re-raising the signal it caught (a
            # service manager counts that as a clean stop).
            assert process.returncode in (0, -signal.SIGTERM), output()
            assert "Application shutdown complete" in output()
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()


def _wait_until_live(process: subprocess.Popen[str], port: int, output: Callable[[], str]) -> None:
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, output()
        try:
            live = httpx.get(f"http://127.0.0.1:{port}/health/live", timeout=1)
            if live.status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "the server did not start:\n" + output()
        time.sleep(0.1)  # polling a real server until it is live


def sign_in_over_http(port: int, email: str, password: str) -> dict[str, str]:
    """The headers of a signed-in request: the session cookie and a fresh antiforgery token.
    (The cookie is Secure; curl and browsers send it to localhost, httpx needs a hand.)"""
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
        login = http.post("/auth/login", json={"email": email, "password": password})
        assert login.status_code == 204, login.text
        cookie = f"{SESSION_COOKIE}={login.cookies[SESSION_COOKIE]}"
        token = http.get("/auth/csrf", headers={"Cookie": cookie}).json()["token"]
    return {"Cookie": cookie, CSRF_HEADER: token}
