"""The worker's periodic summary: what its handlers finished, counted per queue and logged at
INFO once per interval (nothing when nothing finished), and once more when the worker stops.

Successful jobs are logged one by one only at DEBUG (``caravel worker -v``): a line per job costs
a busy worker a measurable share of its time and floods the log, while a count per queue every
few seconds tells an operator that work is being done, and how much. Failures keep their own
line at INFO (and abandoned attempts at WARNING) as they happen; the summary counts them too.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import timedelta

from caravel.clock import Clock, duration_ms

__all__ = ["OUTCOMES", "JobSummary"]

logger = logging.getLogger("caravel.worker")

#: The ends an attempt can come to, in the order the summary names them.
OUTCOMES = (
    "completed",
    "failed",
    "dead_lettered",
    "snoozed",
    "cancelled",
    "abandoned",
    "fenced",
)
_WORDS = {
    "completed": "completed",
    "failed": "failed (will retry)",
    "dead_lettered": "dead-lettered",
    "snoozed": "snoozed",
    "cancelled": "cancelled",
    "abandoned": "abandoned",
    "fenced": "fenced off (lease lost)",
}


class JobSummary:
    """Counts the attempts that ended since the last summary, per queue and outcome."""

    def __init__(self, clock: Clock, interval: timedelta | None) -> None:
        self._clock = clock
        self._interval = interval
        self._counts: dict[str, Counter[str]] = {}
        self._since = clock.now_ms()

    def count(self, queue: str, outcome: str) -> None:
        """One attempt of ``queue`` ended as ``outcome`` (one of :data:`OUTCOMES`)."""
        if self._interval is None:
            return
        counts = self._counts.get(queue)
        if counts is None:
            counts = self._counts[queue] = Counter()
        counts[outcome] += 1

    def reset(self) -> None:
        """Forget what was counted so far and start the interval now (a worker's run starts
        its summaries afresh: one-off steps before it are not part of them)."""
        self._counts = {}
        self._since = self._clock.now_ms()

    def run_once(self) -> dict[str, dict[str, int]]:
        """Log one line per queue whose attempts ended since the last summary, and start
        counting afresh; returns what was logged (queue -> outcome -> count)."""
        now = self._clock.now_ms()
        seconds = max(0, now - self._since) / 1000
        self._since = now
        counted, self._counts = self._counts, {}
        logged: dict[str, dict[str, int]] = {}
        for queue in sorted(counted):
            counts = {name: counted[queue][name] for name in OUTCOMES if counted[queue][name]}
            logged[queue] = counts
            if logger.isEnabledFor(logging.INFO):
                said = ", ".join(f"{n} {_WORDS[name]}" for name, n in counts.items())
                logger.info(
                    "jobs finished in the last %.0f s: %s",
                    seconds,
                    said,
                    extra={"queue": queue, "summary": counts},
                )
        return logged

    async def run(self) -> None:
        """Summarise every interval, on the clock, until cancelled (never, without one)."""
        if self._interval is None:
            return
        every = duration_ms(self._interval)
        while True:
            await self._clock.sleep_until(self._since + every)
            self.run_once()
