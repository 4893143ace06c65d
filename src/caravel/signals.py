"""In-process signals that a queue may have new work.

An enqueue through a :class:`~caravel.queue.DatabaseQueue` signals the queues it wrote to, so a
worker in the same process starts at once on any database. The worker's listener feeds the same
hub from the wake-ups other processes send (PostgreSQL's ``NOTIFY``, SQLite's wake-up sockets).
A leaf: the facade signals, the worker waits, and neither imports the other for it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable

__all__ = ["WakeupHub"]


class WakeupHub:
    """One event per queue name; waiters clear it before looking and wait on it after."""

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}

    def event(self, queue: str) -> asyncio.Event:
        found = self._events.get(queue)
        if found is None:
            found = self._events[queue] = asyncio.Event()
        return found

    def notify(self, queues: Iterable[str]) -> None:
        for queue in queues:
            found = self._events.get(queue)
            if found is not None:
                found.set()

    def notify_threadsafe(self, loop: asyncio.AbstractEventLoop, queues: Iterable[str]) -> None:
        """:meth:`notify` from another thread than ``loop``'s, where the hub's waiters are:
        handed to the loop only when something in this process waits on one of ``queues``."""
        watched = [queue for queue in queues if queue in self._events]
        if watched:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(self.notify, watched)

    async def wait(
        self,
        queue: str,
        seconds: float,
        sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> bool:
        """Wait up to ``seconds`` for a signal on ``queue``; true when one came. ``sleep`` is the
        clock's sleep to time the wait with (an injected test clock); by default the event
        loop's time."""
        event = self.event(queue)
        if event.is_set():
            return True
        if sleep is None:
            try:
                async with asyncio.timeout(seconds):
                    await event.wait()
            except TimeoutError:
                return False
            return True
        signalled = asyncio.ensure_future(event.wait())
        timer = asyncio.ensure_future(sleep(seconds))
        try:
            await asyncio.wait({signalled, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            signalled.cancel()
            timer.cancel()
        return event.is_set()
