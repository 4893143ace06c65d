"""Time as the queue sees it.

Queue times are whole milliseconds since the Unix epoch (UTC). A :class:`Clock` supplies the
current time and a way to wait; the worker, the queue and the relay take one, so tests move time
forward instead of sleeping (see :class:`caravel.testing.ManualClock`).
"""

from __future__ import annotations

import asyncio
import math
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol

__all__ = ["Clock", "SystemClock", "duration_ms", "from_ms", "to_ms_ceil"]


class Clock(Protocol):
    """A source of UTC time in milliseconds, and a way to wait for it to pass."""

    def now_ms(self) -> int:
        """The current time in whole milliseconds since the epoch."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait until ``seconds`` have passed on this clock."""
        ...


class SystemClock:
    """The machine's UTC wall clock. Keep clocks in sync across worker machines (NTP)."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


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
