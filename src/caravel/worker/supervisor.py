"""How a worker's run keeps its loops: each runs as a task named ``caravel-<name>``. An error in
a loop the worker depends on (a fetcher, the paused set) stops the worker. In a loop it can do
without (heartbeat, gauges, the wake-up listener, ...), an error the loop does not handle itself
ends only that loop, logged, and the worker carries on (claims poll without wake-ups; the
registry shows the worker as lost)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from caravel.worker.ending import cancel_and_wait
from caravel.worker.reporting import logger

__all__ = ["Supervisor"]

Loop = Coroutine[Any, Any, None]


class Supervisor:
    """The loops of one run, and what an error in each of them does."""

    def __init__(self, on_fault: Callable[[BaseException], None]) -> None:
        self._on_fault = on_fault
        self._tasks: list[asyncio.Task[None]] = []

    def start(self, loop: Loop, name: str) -> None:
        """Run one of the worker's loops; an error in it stops the worker."""

        async def guarded() -> None:
            try:
                await loop
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._on_fault(exc)

        self._tasks.append(asyncio.create_task(guarded(), name=f"caravel-{name}"))

    def start_side(self, loop: Loop, name: str) -> None:
        """Run a loop the worker can do without: an error it does not handle itself ends that
        loop, logged."""

        async def guarded() -> None:
            try:
                await loop
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.error(
                    "worker %s loop stopped: %s",
                    name,
                    type(exc).__name__,
                    extra={"error_type": type(exc).__name__},
                )

        self._tasks.append(asyncio.create_task(guarded(), name=f"caravel-{name}"))

    async def cancel(self) -> None:
        """Cancel every loop and wait for them to end (a loop that swallowed its cancel is
        cancelled again; see :mod:`~caravel.worker.ending`)."""
        await cancel_and_wait(self._tasks)
