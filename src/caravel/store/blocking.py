"""Driver connections that callers' threads use themselves, blocking, for the one operation that
skips the event loop: the sync facade's one-job enqueue (see
:meth:`~caravel.store.protocol.Store.job_insert_blocking`). Handing each call to the store's loop
and waiting for it would cost more than the insert itself.

:class:`KeptConnections` keeps a few open between uses; :class:`Deadlines` cuts a use that
outlives the store's deadline, from the store's event loop, which looks only while uses keep
coming.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Deadlines", "KeptConnections"]

C = TypeVar("C")


class KeptConnections(Generic[C]):
    """Blocking connections for callers' threads, made by ``open``. Up to ``keep`` idle ones are
    kept between uses (opening one costs more than a statement); a burst of threads opens more,
    up to ``limit`` open at once, closed again after their use. A connection ``usable`` no
    longer accepts is closed; when it is also ``broken`` (the server went away) the idle ones
    are closed with it."""

    def __init__(
        self,
        open_: Callable[[], C],
        close: Callable[[C], None],
        *,
        keep: int,
        limit: int,
        usable: Callable[[C], bool],
        broken: Callable[[C], bool],
    ) -> None:
        self._open = open_
        self._close = close
        self._keep = keep
        self._limit = limit
        self._usable = usable
        self._broken = broken
        self._idle: list[C] = []
        self._opened = 0  # idle or in use
        self._lock = threading.Lock()
        self._closed = False

    def take(self) -> C | None:
        """An idle connection, or a new one; ``None`` when ``limit`` are open already."""
        with self._lock:
            if self._idle:
                return self._idle.pop()
            if self._opened >= self._limit:
                return None
            self._opened += 1
        try:
            return self._open()
        except BaseException:
            with self._lock:
                self._opened -= 1
            raise

    def put(self, conn: C) -> None:
        """Give back a connection :meth:`take` gave, after its use."""
        stale: list[C] = []
        if self._usable(conn):
            with self._lock:
                if not self._closed and len(self._idle) < self._keep:
                    self._idle.append(conn)
                    return
        elif self._broken(conn):
            with self._lock:
                stale, self._idle = self._idle, []
        for one in (*stale, conn):
            self._discard(one)

    def _discard(self, conn: C) -> None:
        with self._lock:
            self._opened -= 1
        with contextlib.suppress(Exception):  # already gone: nothing to release
            self._close(conn)

    def close(self) -> None:
        """Close the idle connections; those in use are closed when they come back."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            self._discard(conn)


class Deadlines(Generic[C]):
    """Blocking uses of connections on callers' threads, each cut (``cut(conn)``) once it has
    run past its deadline, as the store's own operations are.

    A timer on the store's event loop looks at the running uses when the earliest of them comes
    due, and at the latest one deadline after its previous look while uses keep coming; it stops
    once a look finds none running and none begun since the one before. A use whose deadline
    comes before the next look (the first after a quiet spell) hands the loop an earlier one,
    so a steady stream of uses costs the loop one look per deadline, and a quiet queue none."""

    def __init__(self, cut: Callable[[C], None]) -> None:
        self._cut = cut
        self._running: dict[int, tuple[float, C]] = {}
        self._tokens = itertools.count()
        self._lock = threading.Lock()
        self._busy = False  # a use began since the last look
        self._timeout = 0.0  # the latest use's, which the uses after it are likely to have
        #: When the loop looks next (infinity: it does not, until asked), and which loop.
        self._next_look = math.inf
        self._looking: asyncio.AbstractEventLoop | None = None
        self._timer: tuple[asyncio.AbstractEventLoop, asyncio.TimerHandle] | None = None

    def begin(self, conn: C, timeout: float, loop: asyncio.AbstractEventLoop) -> int:
        """Watch a use of ``conn`` that must end within ``timeout`` seconds; its token."""
        deadline = time.monotonic() + timeout
        token = next(self._tokens)
        self._running[token] = (deadline, conn)
        self._busy = True
        self._timeout = timeout
        if deadline < self._next_look or loop is not self._looking:
            with self._lock:
                ask = deadline < self._next_look or loop is not self._looking
                if ask:
                    self._next_look, self._looking = deadline, loop
            if ask:
                with contextlib.suppress(RuntimeError):  # the loop is closed, the store too
                    loop.call_soon_threadsafe(self._arm, loop, deadline)
        return token

    def end(self, token: int) -> None:
        """The use ``token`` names has ended."""
        self._running.pop(token, None)

    def _arm(self, loop: asyncio.AbstractEventLoop, at: float) -> None:
        """Have the loop look at ``at``, unless it already looks by then (on the loop)."""
        delay = max(0.0, at - time.monotonic())
        if self._timer is not None:
            armed_on, timer = self._timer
            if armed_on is loop and timer.when() <= loop.time() + delay:
                return
            timer.cancel()
        self._timer = (loop, loop.call_later(delay, self._look, loop))

    def _look(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        now = time.monotonic()
        for token, (deadline, conn) in self._running.copy().items():
            if deadline <= now and self._running.pop(token, None) is not None:
                self._cut(conn)
        with self._lock:
            if not self._busy and not self._running:
                self._next_look = math.inf
                return
            self._busy = False
            deadlines = [deadline for deadline, _ in self._running.copy().values()]
            at = self._next_look = min([*deadlines, now + self._timeout])
        self._arm(loop, at)
