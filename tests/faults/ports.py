"""Ports of the private servers, kept out of everyone else's way.

A private server keeps its port for the whole test session, including the seconds it is down
while a test restarts it. A port found by binding port 0 comes from the kernel's ephemeral
range, which every other test (a web server, an outgoing connection) also draws from, and a
second private server in another test process could be handed the same port in that window:
it would then answer on the first one's address, and vanish with its own test. So the ports
come from below the ephemeral range, and each is reserved by a file in a shared folder that
names its owner process; a reservation whose owner is gone is taken over.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import tempfile
from pathlib import Path

__all__ = ["pid_alive", "release_port", "reserve_port"]

DIRECTORY = Path(tempfile.gettempdir()) / "caravel-test-ports"
#: Where the ports come from when the kernel's ephemeral range cannot be read.
LOWEST, HIGHEST = 20000, 32767


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _candidates() -> range:
    """Ports below the ephemeral range (Linux: ``ip_local_port_range``, 32768 by default)."""
    highest = HIGHEST
    with contextlib.suppress(OSError, ValueError, IndexError):
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text(encoding="utf-8")
        highest = int(text.split()[0]) - 1
    return range(max(1024, min(LOWEST, highest - 4000)), highest + 1)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _claim(path: Path, owner: int) -> bool:
    """Create the reservation ``path`` for ``owner``; take it over from a dead owner."""
    for _ in range(2):
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            try:
                holder = int(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return False  # being written right now, or unreadable: someone else's
            if pid_alive(holder):
                return False
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            continue
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(str(owner))
        return True
    return False


def reserve_port(attempts: int = 200, candidates: range | None = None) -> int:
    """A port that nothing listens on and no live test process has reserved, now reserved for
    this process until :func:`release_port` (or until this process is gone). ``candidates``
    narrows the choice (the default: every port below the ephemeral range)."""
    DIRECTORY.mkdir(mode=0o777, exist_ok=True)
    candidates = _candidates() if candidates is None else candidates
    for _ in range(attempts):
        port = random.choice(candidates)
        if not _claim(DIRECTORY / str(port), os.getpid()):
            continue
        if _bindable(port):
            return port
        release_port(port)
    raise RuntimeError(f"no free port for a private server in {candidates} after {attempts} tries")


def release_port(port: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        (DIRECTORY / str(port)).unlink()
