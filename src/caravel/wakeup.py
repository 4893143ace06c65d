"""In-process signals that a queue may have new work.

An enqueue through a :class:`~caravel.queue.DatabaseQueue` signals the queues it wrote to, so a
worker in the same process starts at once on any database. On PostgreSQL a listener feeds the
same hub from ``NOTIFY`` messages sent by other processes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

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

    async def wait(self, queue: str, seconds: float) -> bool:
        """Wait up to ``seconds`` for a signal on ``queue``; true when one came."""
        event = self.event(queue)
        if event.is_set():
            return True
        try:
            async with asyncio.timeout(seconds):
                await event.wait()
        except TimeoutError:
            return False
        return True
