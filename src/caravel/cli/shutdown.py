"""What ``caravel worker`` says while it stops: what the first signal waits for, which jobs it
abandoned and when they run again, and whether handler threads finished or were abandoned."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from caravel.worker import AbandonedJob, QueueWorker, Stopping

__all__ = ["abandoned_line", "stopped_line", "stopping_line"]


def _jobs(count: int) -> str:
    return f"{count} job" if count == 1 else f"{count} jobs"


def _seconds(duration: timedelta) -> str:
    return f"{duration.total_seconds():g} s"


def stopping_line(stopping: Stopping) -> str:
    """``stopping: waiting up to 30 s for 2 jobs; Ctrl+C again to cancel them``."""
    if stopping.jobs == 0:
        return "stopping: no jobs running"
    if stopping.cancelling:
        return f"stopping: cancelling {_jobs(stopping.jobs)} now"
    them = "it" if stopping.jobs == 1 else "them"
    return (
        f"stopping: waiting up to {_seconds(stopping.grace)} for {_jobs(stopping.jobs)}; "
        f"Ctrl+C again to cancel {them}"
    )


def _moment(moment: datetime, now: datetime) -> str:
    return f"{moment:%H:%M:%S}" if moment.date() == now.date() else f"{moment:%Y-%m-%d %H:%M:%S}"


def abandoned_line(jobs: Sequence[AbandonedJob], now: datetime) -> str:
    """``abandoned 2 jobs; their leases end at 12:31:05 UTC and they run again after that``."""
    ends = sorted(job.lease_expires_at.replace(microsecond=0) for job in jobs)
    first, last = _moment(ends[0], now), _moment(ends[-1], now)
    if len(jobs) == 1:
        return f"abandoned 1 job; its lease ends at {first} UTC and it runs again after that"
    when = f"at {first}" if first == last else f"between {first} and {last}"
    return (
        f"abandoned {_jobs(len(jobs))}; their leases end {when} UTC and they run again after that"
    )


def stopped_line(worker: QueueWorker) -> str:
    """The last line, printed when nothing is left to wait for: ``stopped``, saying whether
    synchronous handlers still running at the stop finished or were abandoned."""
    left = worker.threads_abandoned
    if left:
        threads = "thread" if left == 1 else "threads"
        return (
            f"stopped; abandoned {left} synchronous handler {threads} still running "
            "(the process exits without waiting for them)"
        )
    if worker.threads_at_stop:
        return "stopped; every synchronous handler thread finished"
    return "stopped"
