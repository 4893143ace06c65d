"""Jobs with an attempt history, made by a real worker on a hand-moved clock, for the pages
that show it (the job page's attempts, the dead-letter list's last failure): a capture that
fails once and then completes, and one that fails every attempt and is a dead letter.

Each failure raises :class:`CardDeclined` with a message that must never be shown
(:data:`SECRET`); the safe detail, a text with markup in it (so a page that did not escape it
would run script), comes from the handler (``JobFailed(safe_detail=...)``, the first job) or
from the worker's redactor (the second, whose exception class is then ``CardDeclined``'s). Each
attempt takes 1.2 s of the hand-moved clock. The HTTP tests, the browser tests and
``scripts/screenshots.py`` use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from caravel import (
    DatabaseQueue,
    DispatchOptions,
    JobContext,
    JobFailed,
    JobRegistry,
    QueueOptions,
    QueueWorker,
    WorkerOptions,
)
from caravel.testing import ManualClock

__all__ = [
    "DETAIL",
    "QUEUE",
    "SECRET",
    "TENANT",
    "TOOK",
    "Capture",
    "CardDeclined",
    "History",
    "redact",
    "run",
]

QUEUE = "payments"
TENANT = "acme"
#: An exception message: it holds what a page must never show.
SECRET = "card 4111-1111-1111-1111 declined by issuer"
#: What the handler marks safe: shown, as text.
DETAIL = "provider answered 503 <script>window.__detail=1</script>"


class CardDeclined(Exception):
    """The application's error: its class is kept, never its message."""


#: How long each attempt takes, on the clock of the :func:`run` under way.
TOOK = timedelta(milliseconds=1_200)
_clocks: list[ManualClock] = []


@dataclass(frozen=True)
class Capture:
    order: int
    failures: int
    """How many attempts fail before one completes."""
    marked: bool = True
    """Whether the handler marks the detail safe itself (else the redactor makes it)."""


async def capture(job: Capture, ctx: JobContext[Any]) -> None:
    await _clocks[-1].advance(TOOK)
    if ctx.attempt > job.failures:
        return
    if not job.marked:
        raise CardDeclined(SECRET)
    try:
        raise CardDeclined(SECRET)
    except CardDeclined as error:
        raise JobFailed(SECRET, safe_detail=f"{DETAIL} (attempt {ctx.attempt})") from error


def redact(error: BaseException) -> str | None:
    """The worker's redactor: a safe text for the errors it knows, nothing for the others."""
    return f"{DETAIL} (redacted)" if isinstance(error, CardDeclined) else None


registry = JobRegistry()
registry.register("payments.capture.v1", Capture, capture)


@dataclass(frozen=True)
class History:
    """The jobs :func:`run` made: ``recovered`` failed once (the handler marked its detail
    safe) then completed; ``dead`` failed its three attempts (the redactor made their detail),
    keeping only the last ``keep`` records."""

    recovered: Any
    dead: Any
    keep: int


async def run(url: str, *, start: datetime, keep: int = 2) -> History:
    """Make the two jobs at ``url`` (migrated) from ``start`` on, a few seconds apart, through
    one real worker whose ``attempt_history`` is ``keep``."""
    clock = ManualClock(start)
    _clocks.append(clock)
    options = QueueOptions(retry_delay=timedelta(seconds=10), max_attempts=3)
    async with (
        DatabaseQueue(url, registry, options=options, clock=clock) as queue,
        QueueWorker(queue, options=WorkerOptions(attempt_history=keep, redactor=redact)) as worker,
    ):
        where = DispatchOptions(queue=QUEUE, tenant_id=TENANT)
        dead = (await queue.enqueue(Capture(1, failures=3, marked=False), where)).job_id
        recovered = (await queue.enqueue(Capture(2, failures=1), where)).job_id
        for _ in range(3):  # each round: one attempt of each job still to run
            await clock.advance(timedelta(seconds=2))
            while await worker.run_once(QUEUE):
                await clock.advance(timedelta(milliseconds=350))
            await clock.advance(timedelta(minutes=1))
    _clocks.remove(clock)
    return History(recovered=recovered, dead=dead, keep=keep)
