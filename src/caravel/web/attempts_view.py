"""How the job page shows a job's attempt history: one row per attempt, newest first, with the
attempt still running (which has no record until it ends) on top.

Only what the records hold is shown: outcome, failure category, exception class, the detail a
handler marked safe, the worker, and the times. Never a payload or an exception's message (the
records have neither). Nothing here touches the database.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from caravel.attempts import AttemptOutcome, AttemptRecord
from caravel.jobs import JobState, JobStatus
from caravel.web.presentation import span

__all__ = ["RUNNING", "AttemptRow", "attempt_rows", "took"]

#: The outcome word of the attempt running now.
RUNNING = "running"

#: What each outcome's end time is.
_ENDED = {AttemptOutcome.LEASE_EXPIRED.value: "Lease ended", RUNNING: "Lease expires"}
#: What each outcome's next time is (a failure's retry, a snooze's wake-up).
_AGAIN = {AttemptOutcome.SNOOZED.value: "Runs again at"}


@dataclass(frozen=True, slots=True)
class AttemptRow:
    """One attempt on the job page. ``ended_at`` is when its outcome was recorded, when its
    lease ended (``lease_expired``), or when its lease expires (still running); ``ended``
    and ``again`` are the labels of that time and of ``retry_at``."""

    attempt: int
    outcome: str
    category: str | None
    error_class: str | None
    detail: str | None
    worker_id: UUID | None
    host: str | None
    pid: int | None
    claimed_at: datetime | None
    ended_at: datetime | None
    duration: str | None
    retry_at: datetime | None
    ended: str = "Finished"
    again: str = "Retry at"


def took(duration: timedelta | None) -> str | None:
    """An attempt's duration for reading: ``320 ms``, ``4.2 s``, else as :func:`span` says."""
    if duration is None:
        return None
    ms = duration / timedelta(milliseconds=1)
    if ms < 1000:
        return f"{int(ms)} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    return span(ms / 1000)


def _row(record: AttemptRecord) -> AttemptRow:
    outcome = record.outcome.value
    return AttemptRow(
        attempt=record.attempt,
        outcome=outcome,
        category=record.category,
        error_class=record.error_class,
        detail=record.detail,
        worker_id=record.worker_id,
        host=record.host,
        pid=record.pid,
        claimed_at=record.claimed_at,
        ended_at=record.finished_at,
        duration=took(record.duration),
        retry_at=record.retry_at,
        ended=_ENDED.get(outcome, "Finished"),
        again=_AGAIN.get(outcome, "Retry at"),
    )


def attempt_rows(job: JobStatus, records: Sequence[AttemptRecord]) -> list[AttemptRow]:
    """The job's attempts, newest claim first: the running one (from the job row: its worker
    is in the Workers page, its record is written when it ends), then ``records`` (oldest
    first, as :meth:`~caravel.QueueInspector.get_attempts` returns them) in reverse."""
    rows = [_row(record) for record in reversed(records)]
    if job.state is JobState.RUNNING:
        now = AttemptRow(
            attempt=job.attempt,
            outcome=RUNNING,
            category=None,
            error_class=None,
            detail=None,
            worker_id=None,
            host=None,
            pid=None,
            claimed_at=job.started_at,
            ended_at=job.lease_expires_at,
            duration=None,
            retry_at=None,
            ended=_ENDED[RUNNING],
        )
        rows.insert(0, now)
    return rows
