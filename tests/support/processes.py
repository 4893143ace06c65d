"""Running the real command line as subprocesses, and reading the evidence their handlers leave
(see ``tests/apps/workload.py``). Waiting here is for real processes, so it polls real time with
a deadline instead of using the injected clock."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The subprocesses import this checkout's caravel (its ``src``) and test apps, not whichever
#: caravel the environment has installed.
PYTHONPATH = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
CARAVEL = shutil.which("caravel", path=str(Path(sys.executable).parent)) or "caravel"


@dataclass(frozen=True)
class Event:
    kind: str
    job_id: str
    attempt: int
    at: float
    pid: int


def read_ledger(directory: Path) -> list[Event]:
    """Every worker's ledger events in the order they happened. The files are named by pid, which
    says nothing of which worker ran first; the times are ``time.monotonic()``, one clock for the
    whole machine on Linux."""
    events: list[Event] = []
    for path in sorted(directory.glob("ledger-*.log")):
        for line in path.read_text(encoding="utf-8").splitlines():
            kind, job_id, attempt, at, pid = line.split()
            events.append(Event(kind, job_id, int(attempt), float(at), int(pid)))
    return sorted(events, key=lambda event: event.at)


def wait_until(
    condition: Callable[[], bool], timeout: float = 30.0, what: str = "", interval: float = 0.02
) -> None:
    """Return once ``condition()`` holds, asking again every ``interval`` seconds of real time;
    fail after ``timeout`` seconds. For real processes and servers, which the injected clock
    does not drive (in one event loop, :func:`tests.support.until`)."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or condition}")
        time.sleep(interval)


class WorkerProcess:
    """``caravel worker`` in a subprocess, with the test workload registry."""

    def __init__(
        self,
        url: str,
        evidence: Path,
        queues: Sequence[str],
        *extra: str,
        app: str = "tests.support.apps.workload:registry",
    ) -> None:
        args = [CARAVEL, "worker", "--url", url, "--app", app]
        for queue in queues:
            args += ["--queue", queue]
        args += list(extra)
        env = {**os.environ, "CARAVEL_TEST_EVIDENCE": str(evidence), "PYTHONPATH": PYTHONPATH}
        self.process = subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def signal(self, signum: int = signal.SIGTERM) -> None:
        self.process.send_signal(signum)

    def wait(self, timeout: float = 30.0) -> tuple[int, str]:
        try:
            _, err = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, err = self.process.communicate()
            raise AssertionError(f"worker did not exit within {timeout}s; stderr:\n{err}") from None
        return self.process.returncode, err

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CARAVEL, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": PYTHONPATH, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def served_page(
    argv: Sequence[str], url: str, *, cwd: Path, env: dict[str, str] | None = None
) -> str:
    """Start a server command (``caravel dashboard ...``), wait until ``url`` answers 200, return
    that page; then stop it as a reader would, with Ctrl+C, and check that it exits 0."""
    with tempfile.TemporaryFile(mode="w+") as log:  # a pipe nobody reads could fill and stall it
        process = subprocess.Popen(
            list(argv), cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, text=True
        )
        page: list[str] = []

        def answered() -> bool:
            if process.poll() is not None:
                return True
            try:
                with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 (loopback)
                    page.append(response.read().decode())
            except urllib.error.HTTPError as exc:
                raise AssertionError(f"{url} answered {exc.code}") from None
            except OSError:  # not listening yet
                return False
            return True

        try:
            wait_until(answered, timeout=60, what=f"{url} to answer")
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        log.seek(0)
        output = log.read()
    assert page, f"{argv[0]} exited {process.returncode} before serving {url}:\n{output}"
    assert process.returncode == 0, f"exited {process.returncode} after Ctrl+C:\n{output}"
    return page[0]
