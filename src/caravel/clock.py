"""Time as the queue sees it.

Queue times are whole milliseconds since the Unix epoch (UTC). A :class:`Clock` supplies the
current time and a way to wait; the worker, the queue and the relay take one, so tests move time
forward instead of sleeping (see :class:`caravel.testing.ManualClock`).

A wait's deadline is fixed when the wait is asked for, not when its coroutine first runs: a loop
that starts a timer in a task of its own (``asyncio.ensure_future(clock.sleep(...))``) must not
lose the time that passes before that task is scheduled. A loop that knows the moment it wants
(the lease watchdog, the scheduler) asks for that moment with ``sleep_until``, so no time read
earlier can go stale on the way.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

__all__ = ["Clock", "SystemClock", "duration_ms", "from_ms", "to_ms_ceil", "woken_or_at"]


class Clock(Protocol):
    """A source of UTC time in milliseconds, and a way to wait for it to pass."""

    def now_ms(self) -> int:
        """The current time in whole milliseconds since the epoch."""
        ...

    def sleep(self, seconds: float) -> Awaitable[None]:
        """Wait until ``seconds`` have passed on this clock since this call."""
        ...

    def sleep_until(self, deadline_ms: int) -> Awaitable[None]:
        """Wait until this clock reads ``deadline_ms`` or later (at once if it already does)."""
        ...


class SystemClock:
    """The machine's UTC wall clock. Keep clocks in sync across worker machines (NTP)."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def sleep(self, seconds: float) -> Coroutine[Any, Any, None]:
        # Timed on the monotonic clock (the event loop's), from this call.
        return _sleep_until_monotonic(time.monotonic() + max(0.0, seconds))

    def sleep_until(self, deadline_ms: int) -> Coroutine[Any, Any, None]:
        """The span to ``deadline_ms`` as read now, waited on the monotonic clock: a wall clock
        stepped during the wait (NTP) ends it off the mark, so callers read the time again
        when they wake, as the watchdog and the scheduler do."""
        return self.sleep(max(0, deadline_ms - self.now_ms()) / 1000)


async def _sleep_until_monotonic(deadline: float) -> None:
    await asyncio.sleep(max(0.0, deadline - time.monotonic()))


async def woken_or_at(clock: Clock, wake: asyncio.Event, until_ms: int | None) -> None:
    """Wait until ``wake`` is set or ``clock`` reads ``until_ms`` (``None``: only ``wake``),
    whichever comes first: the sleep of a service loop that keeps moments on the clock (the
    lease watchdog, the progress writer) and is woken when an earlier one is added. The moment
    itself is waited for, so the clock may move before the timer's task first runs."""
    woken = asyncio.ensure_future(wake.wait())
    if until_ms is None:
        await woken
        return
    timer = asyncio.ensure_future(clock.sleep_until(until_ms))
    try:
        await asyncio.wait({woken, timer}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        woken.cancel()
        timer.cancel()


def to_ms_ceil(moment: datetime) -> int:
    """Milliseconds since the epoch, rounded up, so a job is never due before ``moment``."""
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return -((-micros) // 1000)


#: The first and last stored times that read back as a datetime (years 1 to 9999, UTC).
MIN_MS = -62_135_596_800_000
MAX_MS = 253_402_300_799_999


def from_ms(ms: int) -> datetime:
    """The aware UTC datetime for a stored millisecond time."""
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)


def duration_ms(duration: timedelta) -> int:
    """A duration in whole milliseconds, rounded up."""
    return math.ceil(duration / timedelta(milliseconds=1))
