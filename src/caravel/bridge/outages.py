"""Riding out a broker outage: a bridge's loop waits and tries again, for a while.

A lost connection is what brokers do during restarts and network blips; the adapters reconnect
underneath. A bridge loop that meets :class:`~caravel.errors.BrokerError` pauses (1 s, doubling
up to 30 s) and runs its pass again; nothing of the failed pass was recorded as delivered or
acknowledged, so running it again is safe. Failures that last longer than the window end the
loop with the last error, for a supervisor to see.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import timedelta

from caravel.errors import BrokerError, OptionsError
from caravel.validation import check_duration

__all__ = ["DEFAULT_OUTAGE_WINDOW", "Outage"]

logger = logging.getLogger("caravel.bridge")

DEFAULT_OUTAGE_WINDOW = timedelta(minutes=1)
_FIRST_PAUSE = 1.0
_LONGEST_PAUSE = 30.0


class Outage:
    """Consecutive broker failures of one loop, measured on the monotonic clock (a pause is a
    real wait for the broker, not a scheduled time)."""

    def __init__(self, window: timedelta) -> None:
        check_duration(
            "outage_window",
            window,
            timedelta(0),
            timedelta(days=1),
            "must be from 0 to 1 day",
            error=OptionsError,
        )
        self.window = window.total_seconds()
        self._since: float | None = None
        self._pause = _FIRST_PAUSE

    def clear(self) -> None:
        """A pass went through: the next failure starts a new outage."""
        self._since = None
        self._pause = _FIRST_PAUSE

    async def pause(self, error: BrokerError, stop: asyncio.Event) -> None:
        """Wait before the next try (or until ``stop`` is set); raise ``error`` when the
        outage has lasted longer than the window."""
        now = time.monotonic()
        if self._since is None:
            self._since = now
        if now - self._since >= self.window:
            raise error
        logger.warning(
            "message broker unavailable; trying again",
            extra={"operation": error.operation, "retry_in_seconds": self._pause},
        )
        try:
            async with asyncio.timeout(self._pause):
                await stop.wait()
        except TimeoutError:
            pass
        self._pause = min(self._pause * 2, _LONGEST_PAUSE)
