"""Wake-ups across processes on SQLite: a folder of Unix datagram sockets beside the database
file (``queue.db-wakeups/``), one per listening worker.

A worker's listener binds a socket of its own there and waits on it. An enqueue that commits jobs
due now sends each of their queue names, as one datagram, to every socket in the folder; a send
never blocks (a socket whose buffer is full already has wake-ups waiting). A socket nobody
listens on any more (its worker died) refuses the datagram, and the sender removes it. A lost
wake-up only delays the workers until they poll. A socket address holds about a hundred bytes:
where the folder's path is longer, Linux reaches the sockets through a descriptor of the folder
(``/proc/self/fd/N/name``). Where the platform has no Unix datagram sockets, or the path is too
long and there is no such way round, nothing is set up and workers poll as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterable, Iterator

__all__ = ["SUFFIX", "Announcer", "folder_for", "listen"]

logger = logging.getLogger("caravel.store")

#: The folder of sockets is the database file's path with this suffix (like ``-wal``).
SUFFIX = "-wakeups"
_SOCKET = ".sock"
_NAME_LENGTH = 12 + len(_SOCKET)  # a random hex name
#: Socket addresses are at most 104 bytes on BSD and macOS (108 on Linux), the final NUL included.
_MAX_ADDRESS = 103
#: How often a listener checks that its socket is still in place (the folder may be deleted).
CHECK_SECONDS = 5.0
LISTEN_RETRY_SECONDS = 1.0
#: A folder scan is reused while the folder is unchanged, once its modification time is this
#: much older than the scan: a file system with coarse timestamps could otherwise hide a socket
#: bound within the same tick as the scan.
_SETTLED_SECONDS = 2.0
_DATAGRAM = 1024
#: Where a process's open descriptors are reachable as paths (Linux).
PROC_FD = "/proc/self/fd"


def folder_for(database: str) -> str | None:
    """The wake-up folder of the database file ``database``, or ``None`` where wake-ups cannot
    work (no Unix datagram sockets, or a socket path there would be too long)."""
    if not hasattr(socket, "AF_UNIX"):
        return None
    try:
        socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).close()
    except OSError:
        return None
    folder = database + SUFFIX
    if not _fits(folder) and not os.path.isdir(PROC_FD):
        return None
    return folder


def _fits(folder: str) -> bool:
    return len(os.fsencode(folder)) + 1 + _NAME_LENGTH <= _MAX_ADDRESS


@contextlib.contextmanager
def _addressable(folder: str) -> Iterator[str]:
    """``folder`` as socket addresses can name it: itself, or where its path is too long, the
    same folder through a descriptor of it, open for the duration."""
    if _fits(folder):
        yield folder
        return
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"{PROC_FD}/{descriptor}"
    finally:
        os.close(descriptor)


class Announcer:
    """Sends queue names to the listeners in ``folder``, from any thread (the store's, or a
    caller's after an enqueue on it), one at a time."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self._lock = threading.Lock()
        self._sender: socket.socket | None = None
        self._listeners: list[str] = []
        self._seen: tuple[int, float] | None = None  # the folder's mtime, when it was scanned

    def announce(self, queues: Iterable[str]) -> None:
        """Wake the listeners for ``queues``. Never raises and never blocks."""
        with self._lock:
            self._announce(queues)

    def _announce(self, queues: Iterable[str]) -> None:
        listeners = self._scan()
        if not listeners:
            return
        if self._sender is None:
            self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sender.setblocking(False)
        try:
            with _addressable(self.folder) as base:
                self._send(queues, listeners, base)
        except OSError:  # the folder went away since the scan: nobody to wake
            self._seen = None

    def _send(self, queues: Iterable[str], listeners: list[str], base: str) -> None:
        assert self._sender is not None
        for queue in queues:
            data = queue.encode()
            for path in listeners:
                try:
                    self._sender.sendto(data, os.path.join(base, os.path.basename(path)))
                except BlockingIOError:
                    pass  # its buffer is full: it has wake-ups waiting already
                except (ConnectionRefusedError, FileNotFoundError):
                    self._forget(path)
                except OSError as exc:
                    logger.debug(
                        "could not send a wake-up; workers will find the job by polling",
                        extra={"error_type": type(exc).__name__},
                    )

    def _scan(self) -> list[str]:
        """The sockets in the folder, read again whenever the folder may have changed."""
        try:
            mtime = os.stat(self.folder).st_mtime_ns
        except OSError:
            self._listeners, self._seen = [], None
            return self._listeners
        seen = self._seen
        if seen is None or seen[0] != mtime or seen[1] - mtime / 1e9 < _SETTLED_SECONDS:
            scanned_at = time.time()
            try:
                with os.scandir(self.folder) as entries:
                    self._listeners = [e.path for e in entries if e.name.endswith(_SOCKET)]
            except OSError:
                self._listeners = []
            self._seen = (mtime, scanned_at)
        return self._listeners

    def _forget(self, path: str) -> None:
        """Remove the socket of a listener that is gone."""
        with contextlib.suppress(OSError):
            os.unlink(path)
        self._seen = None

    def close(self) -> None:
        with self._lock:
            if self._sender is not None:
                self._sender.close()
                self._sender = None


@contextlib.contextmanager
def _bound(folder: str) -> Iterator[tuple[socket.socket, str]]:
    """A new socket bound in ``folder`` (created when missing); removed again on exit."""
    os.makedirs(folder, exist_ok=True)
    name = secrets.token_hex(6) + _SOCKET
    path = os.path.join(folder, name)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.setblocking(False)
        with _addressable(folder) as base:
            sock.bind(os.path.join(base, name))
        try:
            yield sock, path
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)
    finally:
        sock.close()


async def listen(
    folder: str,
    queues: frozenset[str],
    *,
    check_every: float = CHECK_SECONDS,
    retry_after: float = LISTEN_RETRY_SECONDS,
) -> AsyncIterator[str]:
    """Queue names sent to a socket of this listener's own in ``folder`` that are in
    ``queues``. A socket removed under the listener (looked for every ``check_every`` seconds
    while nothing arrives) is bound again after ``retry_after``; meanwhile the workers poll."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            with _bound(folder) as (sock, path):
                while True:
                    try:
                        async with asyncio.timeout(check_every):
                            data = await loop.sock_recv(sock, _DATAGRAM)
                    except TimeoutError:
                        if not await asyncio.to_thread(os.path.exists, path):
                            break  # the folder was emptied or deleted: bind again
                        continue
                    queue = data.decode(errors="replace")
                    if queue in queues:
                        yield queue
        except OSError as exc:
            logger.warning(
                "wake-up listener could not use its socket; polling until it can",
                extra={"error_type": type(exc).__name__},
            )
        await asyncio.sleep(retry_after)
