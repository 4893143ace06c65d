"""A NATS server with JetStream of the test session's own, for the tests that restart the broker
under a relay or a consumer.

The machine's NATS server (``127.0.0.1:4222``, :mod:`tests.support.jetstream`) is shared with
every other test and test run, so nothing here touches it. :meth:`PrivateNats.create` starts
``nats-server -js`` on a reserved port of ``127.0.0.1`` with its store in a new temporary folder;
:meth:`PrivateNats.restart` stops it (SIGKILL or SIGTERM) and starts it again on the same port over
the same store, so streams, consumers and their acknowledgements survive as they would on a
real server's disk; :meth:`PrivateNats.destroy` kills it and removes the folder.

The binary is ``CARAVEL_TEST_NATS_SERVER``, else ``nats-server`` on the ``PATH``, else
``/usr/sbin/nats-server``. A fixture that cannot start one skips its tests, or fails them under
``CI=true``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.faults.ports import release_port, reserve_port

__all__ = ["PrivateNats", "find_binary"]

PREFIX = "caravel-nats-"


def find_binary() -> Path | None:
    """The ``nats-server`` binary, if there is one."""
    configured = os.environ.get("CARAVEL_TEST_NATS_SERVER")
    if configured:  # when set, the only place looked at
        return Path(configured) if Path(configured).is_file() else None
    found = shutil.which("nats-server")
    if found is not None:
        return Path(found)
    fallback = Path("/usr/sbin/nats-server")
    return fallback if fallback.is_file() else None


class PrivateNats:
    """One throwaway ``nats-server -js`` on ``127.0.0.1:port``, its store in ``root/store``."""

    def __init__(self, root: Path, binary: Path, port: int) -> None:
        self.root = root
        self.store = root / "store"
        self.log_path = root / "server.log"
        self.binary = binary
        self.port = port
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @classmethod
    def create(cls, attempts: int = 5) -> PrivateNats:
        """Start a server on a free port (another one when the chosen port was taken meanwhile).
        Raises ``RuntimeError`` when it cannot."""
        binary = find_binary()
        if binary is None:
            raise RuntimeError("nats-server was not found (set CARAVEL_TEST_NATS_SERVER)")
        root = Path(tempfile.mkdtemp(prefix=PREFIX))
        server = cls(root, binary, 0)
        try:
            for attempt in range(attempts):
                release_port(server.port)
                server.port = reserve_port()
                try:
                    server.start()
                    return server
                except RuntimeError:
                    if attempt == attempts - 1:
                        raise
        except BaseException:
            server.destroy()
            raise
        raise AssertionError("unreachable")

    def start(self, timeout: float = 30.0) -> None:
        """Start the server over its store and wait until it answers."""
        if self.running():
            return
        self.store.mkdir(exist_ok=True)
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                [
                    str(self.binary),
                    "-a",
                    "127.0.0.1",
                    "-p",
                    str(self.port),
                    "-js",
                    "-sd",
                    str(self.store),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while not self.answers():
            if self._process.poll() is not None:
                raise RuntimeError(f"nats-server exited {self._process.returncode}: {self.log()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"nats-server did not answer in {timeout} s: {self.log()}")
            time.sleep(0.05)

    def stop(self, sig: signal.Signals = signal.SIGKILL) -> None:
        """Stop the server with ``sig`` (SIGKILL: a crash; SIGTERM: a clean shutdown) and wait."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(sig)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)

    def restart(self, sig: signal.Signals = signal.SIGKILL, down_for: float = 0.0) -> None:
        """Stop the server, leave it down for ``down_for`` seconds, start it again on the same
        port and store."""
        self.stop(sig)
        if down_for:
            time.sleep(down_for)
        self.start()

    def ensure_running(self) -> None:
        if not self.running():
            self.start()

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def answers(self) -> bool:
        """Whether something on the port sends NATS's ``INFO`` greeting and JetStream is on."""
        with contextlib.suppress(OSError):
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.settimeout(1)
                greeting = sock.recv(4096)
            return greeting.startswith(b"INFO") and b'"jetstream":true' in greeting
        return False

    def log(self, tail: int = 2000) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(encoding="utf-8", errors="replace")[-tail:]
        return ""

    def destroy(self) -> None:
        """Kill the server and remove its folder."""
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
        release_port(self.port)
