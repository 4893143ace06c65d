"""Living through a database outage: a worker whose claim, acknowledgement, renewal or read of
the paused set fails because the database is unreachable for now (an error the dialect marks as
an outage: a lost or refused connection, a server shutting down or starting, a read-only server
after a failover; see :attr:`StoreError.outage <caravel.errors.StoreError>`) tries again after a
pause instead of stopping, for up to :attr:`~caravel.WorkerOptions.outage_window`.

One :class:`Outage` per worker counts the window from the first failure any of its loops met,
and any successful operation ends it. Each loop that retries keeps its own count of failures
in a row for its pauses: 100 ms doubling to 2 s, each drawn at random from its upper half so
that many workers coming back at once do not retry in step, and never past the window's end, so
the last try comes as the window closes. An error that is not an outage, or an outage that
outlasts the window, is raised as before: the worker stops and exits 1, and its supervisor starts
it again. Time is the queue's clock, so a test's :class:`~caravel.testing.ManualClock` drives it.

What a retry may find: a claim whose reply was lost may have committed (the jobs it took run
again once their leases expire, as after a crash); an acknowledgement or renewal carries its
lease token, so one retried after another worker took the job over is refused and handled as a
lost lease, never as a failure of the worker.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable

from caravel.clock import Clock
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
        if self.since_ms is None:
            self.since_ms = now
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
            if self._window_ms > 0:
                logger.error(
                    "database unavailable for %gs (%s during %s): worker stopping with exit "
                    "code 1; restart it once the database is reachable (a service manager does)",
                    (now - self.since_ms) / 1000,
                    type(exc).__name__,
                    getattr(exc, "operation", "?"),
                    extra={"error_type": type(exc).__name__, "outage_seconds": self.window},
                )
            raise exc
        ceiling = min(LONGEST_PAUSE, FIRST_PAUSE * 2 ** min(failures, 16))
        drawn: float = ceiling * (0.5 + 0.5 * float(self._draw()))
        return min(drawn, left / 1000)

    async def wait(self, exc: BaseException, failures: int) -> None:
        """:meth:`pause`, then wait that long on the clock."""
        await self._clock.sleep(self.pause(exc, failures))

    def ended(self) -> None:
        """An operation succeeded: the outage, if there was one, is over."""
        since = self.since_ms
        if since is None:
            return
        self.since_ms = None
        self.survived += 1
        lasted = (self._clock.now_ms() - since) / 1000
        logger.warning(
            "database reachable again after %.1fs; the worker carries on",
            lasted,
            extra={"outage_seconds": lasted},
        )
