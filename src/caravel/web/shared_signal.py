"""The autoscaling signal as ``/metrics`` serves it: read at most once per ``max_age``, and
once for every request that arrives while that read is under way.

Scrapers and autoscalers poll every 15 to 60 seconds (Prometheus) or every 30 (KEDA); a signal
read up to a second ago tells them what a fresh one would. With several of them, or many
replicas of a dashboard behind one address, each request reading the database again would
multiply the cost of the signal by the number of pollers for nothing.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from caravel.autoscaling import ScalingSignal
from caravel.inspector import QueueInspector
from caravel.validation import check_duration

__all__ = ["MAX_AGE", "SharedSignal", "check_max_age"]

#: How old a signal ``/metrics`` answers from may be, by default.
MAX_AGE = timedelta(seconds=1)

#: The longest ``max_age`` accepted: a signal older than this would mislead an autoscaler.
_LONGEST = timedelta(minutes=5)

#: Signals kept per reader, by queue and number of keys: requests name them, so they are
#: bounded (the oldest is dropped first).
_KEPT = 64

Key = tuple[str | None, int, timedelta]


def check_max_age(value: object, field: str = "max_age") -> timedelta:
    """``max_age``: a :class:`~datetime.timedelta` from 0 (every request reads) to 5 minutes.
    Raises :class:`~caravel.errors.ValidationError` naming ``field`` otherwise."""
    return check_duration(field, value, timedelta(0), _LONGEST, "must be from 0 to 5 minutes")


class SharedSignal:
    """:meth:`QueueInspector.scaling_signal <caravel.QueueInspector.scaling_signal>` through a
    short cache: a signal read less than ``max_age`` ago by the reader's clock is answered
    again, and requests arriving during a read wait for it (single flight). A failed read is
    not kept: every waiter gets its error, and the next request reads again."""

    def __init__(self, reader: QueueInspector, *, max_age: timedelta) -> None:
        self.reader = reader
        self.max_age_ms = check_max_age(max_age) // timedelta(milliseconds=1)
        self._kept: dict[Key, tuple[int, ScalingSignal]] = {}
        self._reading: dict[Key, asyncio.Future[ScalingSignal]] = {}

    async def read(self, queue: str | None, *, lost_after: timedelta, keys: int) -> ScalingSignal:
        """The signal of ``queue`` (every queue when ``None``), at most ``max_age`` old."""
        if self.max_age_ms == 0:
            return await self.reader.scaling_signal(queue, lost_after=lost_after, keys=keys)
        key = (queue, keys, lost_after)
        kept = self._kept.get(key)
        if kept is not None and self.reader.clock.now_ms() - kept[0] < self.max_age_ms:
            return kept[1]
        pending = self._reading.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._fresh(key, queue, lost_after, keys))
            self._reading[key] = pending
        # Shielded: one waiter cancelled (its client went away) does not cancel the others' read.
        return await asyncio.shield(pending)

    async def _fresh(
        self, key: Key, queue: str | None, lost_after: timedelta, keys: int
    ) -> ScalingSignal:
        try:
            read_at = self.reader.clock.now_ms()
            signal = await self.reader.scaling_signal(queue, lost_after=lost_after, keys=keys)
            self._kept.pop(key, None)
            self._kept[key] = (read_at, signal)
            while len(self._kept) > _KEPT:
                del self._kept[next(iter(self._kept))]
            return signal
        finally:
            del self._reading[key]
