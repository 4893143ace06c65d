"""A fixed window on sign-in attempts: at most ``permits`` per ``window_seconds``, shared by
every caller of this process. Attempts count whether or not the credentials were right, and
the refusal is the same for existing and unknown accounts.

One shared allowance keeps the sample simple, but one caller can use it up and lock everyone
out for the rest of the window. A real deployment limits per account, per client address or at
the network edge instead.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable


class FixedWindow:
    def __init__(
        self,
        permits: int,
        window_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.permits = permits
        self.window_seconds = window_seconds
        self._clock = clock
        self._window_start = clock()
        self._used = 0

    def acquire(self) -> int | None:
        """Take one permit. Returns ``None`` when allowed; otherwise the whole seconds until the
        window resets (for ``Retry-After``)."""
        now = self._clock()
        if now - self._window_start >= self.window_seconds:
            elapsed_windows = (now - self._window_start) // self.window_seconds
            self._window_start += elapsed_windows * self.window_seconds
            self._used = 0
        if self._used < self.permits:
            self._used += 1
            return None
        remaining = self._window_start + self.window_seconds - now
        return max(1, math.ceil(remaining))
