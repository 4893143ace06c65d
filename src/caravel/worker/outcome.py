"""The decision a run of one claimed job comes to (:class:`Outcome`): what the runner hands
the acknowledger, the worker's reports and its hooks."""

from __future__ import annotations

from dataclasses import dataclass, field

from caravel.attempts import AttemptOutcome
from caravel.jobs import FailureCategory, Lease
from caravel.options import RetryPolicy
from caravel.worker.leases import failed_attempt_outcome
from caravel.worker.watchdog import Abandoned

__all__ = ["Outcome"]


@dataclass(slots=True)
class Outcome:
    """The decision for one attempt: success, a snooze, a failure category, or abandoned (no
    ack).

    ``lease`` is the lease as last renewed; acknowledgements must present it. ``result`` is a
    success's result as JSON text (``None``: nothing to store). ``snooze_ms`` asks for the job
    to run again that long from now without spending an attempt. A failure with ``final``
    dead-letters the job whatever attempts it has left (a discard, a result that cannot be
    stored, one snooze too many; ``discarded`` says it was a discard); ``error_class`` names
    the exception behind it and ``retry`` is the job type's policy for the backoff. ``detail``
    is the failure's safe detail, cleaned (:mod:`caravel.details`): the one text about it that
    is kept. ``error`` is the handler's exception when it raised, kept in memory only (for
    ``caravel.testing``, which reports its class and can re-raise it); it is never stored or
    logged with its message. ``committed`` marks a success the handler's own transaction
    recorded (``ctx.complete_in``, see :mod:`caravel.worker.joined`): nothing is left to write.

    Not frozen, only so that it is cheap to build (one per job, on the drain's hot path): the
    runner sets ``seconds`` once and nothing changes it after that.
    """

    lease: Lease
    failure: FailureCategory | str | None = None
    abandoned: Abandoned | None = None
    seconds: float = 0.0
    error: BaseException | None = field(default=None, compare=False, repr=False)
    result: str | None = field(default=None, repr=False)
    snooze_ms: int | None = None
    final: bool = False
    error_class: str | None = None
    retry: RetryPolicy | None = None
    detail: str | None = None
    discarded: bool = False
    committed: bool = False

    @property
    def succeeded(self) -> bool:
        return self.failure is None and self.abandoned is None and self.snooze_ms is None

    @property
    def category(self) -> str | None:
        """The failure category as stored, or ``None``."""
        return None if self.failure is None else str(self.failure)

    @property
    def dead_letter(self) -> bool:
        """Whether recording this outcome dead-letters the job: a failure that is final, or
        of its last attempt."""
        lease = self.lease
        return self.failure is not None and (self.final or lease.attempt >= lease.max_attempts)

    @property
    def recorded_as(self) -> AttemptOutcome | None:
        """How the attempt's record says it ended; ``None`` for an attempt abandoned without
        an outcome (its record is written by whoever takes the job over), except an operator's
        cancel, which the cancel records."""
        if self.abandoned is not None:
            return AttemptOutcome.CANCELLED if self.abandoned is Abandoned.CANCELLED else None
        if self.failure is not None:
            return failed_attempt_outcome(self.failure, discarded=self.discarded)
        return AttemptOutcome.SNOOZED if self.snooze_ms is not None else AttemptOutcome.COMPLETED
