"""A queue's rate limits: how many job starts (weighted) its claims may make in any window of
``period``, overall and per partition key. A plain value, checked when constructed, that the
store keeps beside the concurrency limits in ``caravel_queue_limits``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from caravel.errors import ValidationError
from caravel.validation import check_duration, check_int, check_queue_name

__all__ = ["MAX_RATE", "MAX_WEIGHT", "RateLimit", "check_rate", "check_weight", "period_ms"]

#: The largest rate a queue may have, overall or per key, in weighted starts per period.
MAX_RATE = 1_000_000

#: The largest weight a job type may declare (``JobRegistry.register(weight=...)``).
MAX_WEIGHT = 10_000

MIN_PERIOD = timedelta(seconds=1)
MAX_PERIOD = timedelta(days=1)


@dataclass(frozen=True, kw_only=True, slots=True)
class RateLimit:
    """How many jobs of ``queue`` may start per ``period``. Checked when constructed.

    Attributes:
        queue: the queue's name (1 to 64 characters of ``[a-z0-9._-]``).
        rate: the weights of the queue's starts within any window of length ``period`` add up
            to at most this (1 to 1,000,000); ``None``: no overall rate.
        per_key: the same, per partition key (1 to 1,000,000); ``None``: no rate per key.
        period: the window's length, from 1 second to 1 day, in whole milliseconds.

    At least one of ``rate`` and ``per_key`` is given. A start is a claim: every attempt
    counts, a retry and a reclaimed expired lease included, with its job's weight (its type's
    ``weight``, 1 by default). The window slides: it is exact at every instant, not per
    calendar period.
    """

    queue: str
    rate: int | None = None
    per_key: int | None = None
    period: timedelta = timedelta(seconds=1)

    def __post_init__(self) -> None:
        check_rate(self.queue, self.rate, self.per_key, self.period)

    @property
    def period_ms(self) -> int:
        """``period`` in milliseconds."""
        return period_ms(self.period)


def period_ms(period: timedelta) -> int:
    """A checked period in whole milliseconds."""
    return period // timedelta(milliseconds=1)


def check_rate(queue: object, rate: object, per_key: object, period: object) -> None:
    """The rules of :class:`RateLimit`, for callers holding the parts (the store checks again
    what it is given). Raises :class:`~caravel.errors.ValidationError`."""
    check_queue_name(queue)
    if rate is None and per_key is None:
        raise ValidationError("rate", "give rate, per_key or both (to remove a rate, clear it)")
    for field, value in (("rate", rate), ("per_key", per_key)):
        if value is not None:
            check_int(field, value, 1, MAX_RATE)
    checked = check_duration(
        "period", period, MIN_PERIOD, MAX_PERIOD, "must be from 1 second to 1 day"
    )
    if checked % timedelta(milliseconds=1):
        raise ValidationError("period", "must be a whole number of milliseconds")


def check_weight(value: object, *, error: type[ValidationError] = ValidationError) -> int:
    """A job type's weight: an integer from 1 to :data:`MAX_WEIGHT`."""
    return check_int("weight", value, 1, MAX_WEIGHT, error=error)
