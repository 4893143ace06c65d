"""What the worker says about each attempt once it ended: the outcome metrics and one structured
log line, never a payload or a handler's exception text (a failure's safe detail, which a handler
or the redactor chose to expose, is a field of its line)."""

from __future__ import annotations

import logging

from caravel import telemetry
from caravel.jobs import ClaimedJob
from caravel.worker.outcome import Outcome
from caravel.worker.runner import Abandoned
from caravel.worker.summary import JobSummary

__all__ = ["OutcomeReport", "log_job", "logger"]

logger = logging.getLogger("caravel.worker")


def log_job(level: int, message: str, claimed: ClaimedJob, **fields: object) -> None:
    """One structured log line about a job: its id, queue, type and attempt. Builds nothing when
    the level is off."""
    if logger.isEnabledFor(level):
        logger.log(
            level,
            message,
            extra={
                "job_id": str(claimed.job_id),
                "queue": claimed.queue,
                "job_type": claimed.job_type,
                "attempt": claimed.attempt,
                **fields,
            },
        )


class OutcomeReport:
    """Reports outcomes as they are written (or fenced off), and abandoned attempts."""

    def __init__(self, summary: JobSummary | None = None) -> None:
        #: Outcomes a newer lease fenced off: their write changed nothing.
        self.lost_acknowledgements = 0
        self._summary = summary

    def _count(self, claimed: ClaimedJob, outcome: str) -> None:
        if self._summary is not None:
            self._summary.count(claimed.queue, outcome)

    def abandoned(self, claimed: ClaimedJob, outcome: Outcome) -> None:
        """The attempt ended without an acknowledgement (``outcome.abandoned`` says why)."""
        reason = None if outcome.abandoned is None else outcome.abandoned.value
        telemetry.record_outcome(
            claimed.queue,
            claimed.job_type,
            seconds=outcome.seconds,
            category=None,
            dead=False,
            abandoned=reason,
        )
        if outcome.abandoned is Abandoned.CANCELLED:  # an operator's doing, not a fault
            self._count(claimed, "cancelled")
            log_job(logging.INFO, "job cancelled", claimed)
            return
        self._count(claimed, "abandoned")
        log_job(logging.WARNING, "job abandoned without acknowledgement", claimed, reason=reason)

    def written(self, claimed: ClaimedJob, outcome: Outcome, held: bool) -> None:
        """An outcome reached the database (``held``) or was fenced off by a newer lease."""
        category = outcome.category
        last = outcome.dead_letter
        snoozed = outcome.snooze_ms is not None
        telemetry.record_outcome(
            claimed.queue,
            claimed.job_type,
            seconds=outcome.seconds,
            category=category,
            dead=last,
            abandoned=None if held else "ack_rejected",
            snoozed=snoozed,
        )
        if not held:
            self.lost_acknowledgements += 1
            self._count(claimed, "fenced")
            log_job(logging.WARNING, "job acknowledgement rejected: lease lost", claimed)
        elif category is not None:
            self._count(claimed, "dead_lettered" if last else "failed")
            log_job(
                logging.INFO,
                "job failed",
                claimed,
                category=category,
                dead_lettered=last,
                detail=outcome.detail,
            )
        elif snoozed:
            self._count(claimed, "snoozed")
            log_job(logging.DEBUG, "job snoozed", claimed, snooze_ms=outcome.snooze_ms)
        else:
            # One line per job only at DEBUG; at INFO the summary counts it (worker/summary.py).
            self._count(claimed, "completed")
            log_job(logging.DEBUG, "job completed", claimed)
