"""Living through a database outage: a worker whose claim, acknowledgement, renewal or read of
the paused set fails because the database is unreachable for now (an error the dialect marks as
an outage: a lost or refused connection, a server shutting down or starting, a read-only server
after a failover; see :attr:`StoreError.outage <caravel.errors.StoreError>`) tries again after a
pause instead of stopping, for up to :attr:`~caravel.WorkerOptions.outage_window`.

One :class:`Outage` per worker counts the window from the first failure any of its loops met,
and a successful write (a claim, an acknowledgement, a renewal) ends it (a successful read does
not, since a server that turned read-only still answers reads); the other loops pausing then try
again at once. Each loop that retries keeps its own count of failures
in a row for its pauses: 100 ms doubling to 2 s, each drawn at random from its upper half so
that many workers coming back at once do not retry in step, and never past the window's end, so
the last try comes as the window closes. An error that is not an outage, or an outage that
outlasts the window, is raised as before: the worker stops and exits 1, and its supervisor starts
it again. Time is the queue's clock, so a test's :class:`~caravel.testing.ManualClock` drives it.

The window holds even when the try that would end it never returns (a connection attempt to a
peer that stopped answering, which the store's per-operation deadline cannot cut because no
connection exists yet): :meth:`Outage.run`, one of the worker's loops, raises the outage's last
error :data:`LONGEST_PAUSE` after the window's end if the outage has not ended by then.

What a retry may find: a claim whose reply was lost may have committed (the jobs it took run
again once their leases expire, as after a crash); an acknowledgement or renewal carries its
lease token, so one retried after another worker took the job over is refused and handled as a
lost lease, never as a failure of the worker.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable

from caravel.clock import Clock, woken_or_at
from caravel.errors import StoreError

__all__ = ["FIRST_PAUSE", "LONGEST_PAUSE", "Outage", "is_outage"]

logger = logging.getLogger("caravel.worker")

#: The pause after a loop's first failed try (seconds); it doubles with each failure in a row.
FIRST_PAUSE = 0.1
#: The longest pause between two tries (seconds).
LONGEST_PAUSE = 2.0


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` says the database is unreachable for now."""
    return isinstance(exc, StoreError) and exc.outage


class Outage:
    """The outage window of one worker (``window`` seconds; 0 stops at the first failure).
    ``draw`` picks a fraction in [0, 1) for the jitter (tests may fix it)."""

    def __init__(
        self, clock: Clock, window: float, *, draw: Callable[[], float] = random.random
    ) -> None:
        self._clock = clock
        self._window_ms = round(window * 1000)
        self._draw = draw
        #: When the current outage began (the clock's ms), or ``None`` while the database works.
        self.since_ms: int | None = None
        #: Outages met and lived through since the worker was built.
        self.survived = 0
        #: The error the current outage last failed an operation with.
        self.last: BaseException | None = None
        self._began = asyncio.Event()
        #: Set when the current outage ends: every loop pausing on it tries again at once.
        self._over = asyncio.Event()
        self._gave_up = False

    @property
    def window(self) -> float:
        return self._window_ms / 1000

    def pause(self, exc: BaseException, failures: int) -> float:
        """An operation failed with ``exc`` after ``failures`` failures in a row of the same
        loop: the seconds to wait before trying again. Raises ``exc`` when it is not an outage,
        or when the window is used up (logging why the worker stops, once)."""
        if not is_outage(exc):
            raise exc
        now = self._clock.now_ms()
        self.last = exc
        if self.since_ms is None:
            self.since_ms = now
            self._gave_up = False
            self._began.set()
            if self._window_ms > 0:
                logger.warning(
                    "database unavailable (%s during %s); retrying for up to %gs",
                    type(exc).__name__,
                    getattr(exc, "operation", "?"),
                    self.window,
                    extra={"error_type": type(exc).__name__, "outage_seconds": self.window},
                )
        left = self.since_ms + self._window_ms - now
        if left <= 0:
            self._give_up(exc, now - self.since_ms)
            raise exc
        ceiling = min(LONGEST_PAUSE, FIRST_PAUSE * 2 ** min(failures, 16))
        drawn: float = ceiling * (0.5 + 0.5 * float(self._draw()))
        return min(drawn, left / 1000)

    async def wait(self, exc: BaseException, failures: int) -> None:
        """:meth:`pause`, then wait that long on the clock, or until another loop's operation
        succeeded and ended the outage."""
        pause = self.pause(exc, failures)
        await woken_or_at(self._clock, self._over, self._clock.now_ms() + round(pause * 1000))

    def _give_up(self, exc: BaseException, lasted_ms: int) -> None:
        """Say once why the worker stops and what to do next (nothing more for a window of 0:
        the worker stops as it always did)."""
        if self._gave_up or self._window_ms == 0:
            return
        self._gave_up = True
        logger.error(
            "database unavailable for %gs (%s during %s): worker stopping with exit code 1; "
            "restart it once the database is reachable (a service manager does)",
            round(lasted_ms / 1000, 1),
            type(exc).__name__,
            getattr(exc, "operation", "?"),
            extra={"error_type": type(exc).__name__, "outage_seconds": self.window},
        )

    async def run(self) -> None:
        """Raise the outage's last error once an outage has outlasted the window by
        :data:`LONGEST_PAUSE` (its last try hangs): one of the worker's loops, so the error
        stops the worker."""
        while True:
            await self._began.wait()
            self._began.clear()
            since = self.since_ms
            if since is None:
                continue
            late = round(LONGEST_PAUSE * 1000)
            await self._clock.sleep_until(since + self._window_ms + late)
            if self.since_ms == since and self.last is not None:
                self._give_up(self.last, self._clock.now_ms() - since)
                raise self.last

    def ended(self) -> None:
        """An operation succeeded: the outage, if there was one, is over."""
        since = self.since_ms
        if since is None:
            return
        self.since_ms = None
        self.last = None
        self._over.set()
        self._over = asyncio.Event()
        self.survived += 1
        lasted = (self._clock.now_ms() - since) / 1000
        logger.warning(
            "database reachable again after %.1fs; the worker carries on",
            lasted,
            extra={"outage_seconds": lasted},
        )
