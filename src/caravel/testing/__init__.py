"""Helpers for testing code that uses Caravel.

- :class:`ManualClock`: time that moves only when the test says, so delays, retries and lease
  expiry happen without waiting.
- :func:`drain`: run every due job (and the jobs they enqueue) through the real worker, and
  report each run as a :class:`JobRun`; with ``advance=True`` it moves the clock too.
- :func:`perform`: run one handler with a realistic context, without a queue.
- :func:`assert_enqueued`, :func:`refute_enqueued`, :func:`all_enqueued`: what the queue holds,
  with failure messages that list what was enqueued instead.
- :class:`ImmediateQueue`: a queue whose ``enqueue`` runs the job before it returns.
- The pytest plugin (:mod:`caravel.testing.plugin`): ``caravel_*`` fixtures.

Each name is imported on first use, so ``from caravel.testing import ManualClock`` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from caravel._lazy import lazy_attributes

if TYPE_CHECKING:
    from caravel.errors import DrainLimitError
    from caravel.testing.assertions import all_enqueued, assert_enqueued, refute_enqueued
    from caravel.testing.clock import ManualClock
    from caravel.testing.drain import drain
    from caravel.testing.enqueued import EnqueuedJob
    from caravel.testing.immediate import ImmediateQueue
    from caravel.testing.perform import perform, perform_sync
    from caravel.testing.runs import JobRun

#: Where each public name lives.
_HOMES = {
    "DrainLimitError": "caravel.errors",
    "EnqueuedJob": "caravel.testing.enqueued",
    "ImmediateQueue": "caravel.testing.immediate",
    "JobRun": "caravel.testing.runs",
    "ManualClock": "caravel.testing.clock",
    "all_enqueued": "caravel.testing.assertions",
    "assert_enqueued": "caravel.testing.assertions",
    "drain": "caravel.testing.drain",
    "perform": "caravel.testing.perform",
    "perform_sync": "caravel.testing.perform",
    "refute_enqueued": "caravel.testing.assertions",
}

__getattr__ = lazy_attributes("caravel.testing", globals(), _HOMES)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "DrainLimitError",
    "EnqueuedJob",
    "ImmediateQueue",
    "JobRun",
    "ManualClock",
    "all_enqueued",
    "assert_enqueued",
    "drain",
    "perform",
    "perform_sync",
    "refute_enqueued",
]
