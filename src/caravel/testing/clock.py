"""A clock you move by hand, so tests make time pass without waiting for it."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any

from caravel.clock import from_ms, to_ms_ceil

__all__ = ["ManualClock"]


class ManualClock:
    """A clock that stands still until :meth:`advance` moves it.

    ``sleep`` waits until the clock has been advanced past the sleeper's wake-up time, so a
    worker's lease timers and renewals fire exactly when a test says, with no real waiting.
    The wake-up time is fixed by the call to ``sleep`` (or is the ``sleep_until`` deadline), so
    an :meth:`advance` that lands before a sleeping task first runs still counts towards it.
    """

    def __init__(self, start: datetime | None = None) -> None:
        moment = start if start is not None else datetime(2030, 1, 1, tzinfo=UTC)
        self._now = to_ms_ceil(moment)
        self._changed = asyncio.Condition()

    def now_ms(self) -> int:
        return self._now

    def now(self) -> datetime:
        """The clock's time as an aware UTC datetime (for ``not_before`` and assertions)."""
        return from_ms(self._now)

    def sleep(self, seconds: float) -> Coroutine[Any, Any, None]:
        # Not a coroutine function: its body would read the time only once its task first ran.
        return self.sleep_until(self._now + max(0, round(seconds * 1000)))

    async def sleep_until(self, deadline_ms: int) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: self._now >= deadline_ms)

    async def advance(self, by: timedelta) -> None:
        """Move time forward and wake every sleeper whose time has come, then let them run."""
        self._now += round(by / timedelta(milliseconds=1))
        async with self._changed:
            self._changed.notify_all()
        for _ in range(5):
            await asyncio.sleep(0)

    async def set(self, moment: datetime) -> None:
        """Jump to ``moment`` (never backwards)."""
        target = to_ms_ceil(moment)
        if target > self._now:
            await self.advance(timedelta(milliseconds=target - self._now))
