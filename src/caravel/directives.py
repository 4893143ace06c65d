"""What a handler can tell the worker besides "done": run me again later (:class:`Snooze`), stop
trying (:class:`Discard`), or this attempt failed, and here is what operators may read about it
(:class:`JobFailed`).

They are exceptions so that a handler can raise them from any depth of its own code, as it
would raise any failure; the worker recognises them before treating an exception as a failed
attempt. None of them has its message stored: a snooze carries its delay, a discard a short
category that is stored like the worker's own failure categories. The one text a failure can
leave in the queue is a ``safe_detail``, given to :class:`JobFailed` or :class:`Discard` by name:
the handler's own statement that the text holds no payload, personal data or secret. The worker
keeps it in the attempt's record, cleaned and cut to
:data:`~caravel.limits.MAX_DETAIL_LENGTH` characters (docs/explanation/guarantees.md).
"""

from __future__ import annotations

import re
from datetime import timedelta

from caravel.errors import ValidationError
from caravel.jobs import FailureCategory
from caravel.limits import MAX_CATEGORY_LENGTH
from caravel.validation import check_duration

__all__ = ["MAX_SNOOZE_DELAY", "Discard", "JobFailed", "Snooze"]

#: The longest a single snooze may put a job off.
MAX_SNOOZE_DELAY = timedelta(days=30)

_CATEGORY = re.compile(r"[A-Za-z][A-Za-z0-9._-]*")


class Snooze(Exception):
    """Raise from a handler to run the job again after ``delay`` without spending an attempt.

    The attempt the claim counted is given back and the job's ``snoozes`` count goes up. A job
    may snooze :data:`~caravel.limits.MAX_SNOOZES` times; the snooze after that dead-letters it
    (category ``SnoozeLimit``), so a handler that always snoozes cannot keep a job alive for
    ever. The write is fenced like a completion: a worker whose lease was taken over snoozes
    nothing. ``delay`` is from 0 to 30 days.
    """

    def __init__(self, delay: timedelta) -> None:
        check_duration("delay", delay, timedelta(0), MAX_SNOOZE_DELAY, "must be from 0 to 30 days")
        self.delay = delay
        super().__init__(f"snooze for {delay}")


class Discard(Exception):
    """Raise from a handler to dead-letter the job now, whatever attempts it has left.

    ``category`` is what the job's ``last_failure`` shows (``Discarded`` by default): a short
    word of your own such as ``"PaymentDeclined"``, 1 to 32 characters of letters, digits,
    ``.``, ``-`` or ``_``, starting with a letter. It is stored, so it must never hold data. The
    exception's class is stored as ``error_class``, so a subclass of :class:`Discard` can name
    the reason as well. ``safe_detail``, when given, is kept in the attempt's record as
    :class:`JobFailed`'s is.
    """

    def __init__(
        self, category: str = FailureCategory.DISCARDED.value, *, safe_detail: str | None = None
    ) -> None:
        if (
            not isinstance(category, str)
            or len(category) > MAX_CATEGORY_LENGTH
            or _CATEGORY.fullmatch(category) is None
        ):
            raise ValidationError(
                "category",
                f"must be 1 to {MAX_CATEGORY_LENGTH} characters of letters, digits, '.', '-' "
                "or '_', starting with a letter",
            )
        self.category = category
        self.safe_detail = _checked_detail(safe_detail)
        super().__init__(category)


class JobFailed(Exception):
    """Raise from a handler to fail the attempt with a text operators may read.

    ``safe_detail`` is that text, for example ``"provider answered 503"``: by passing it under
    this name the handler states that it holds no payload, personal data or secret. The worker
    keeps it in the attempt's record, its failure log line and its span
    (``caravel.failure.detail``), with control characters taken out and cut to
    :data:`~caravel.limits.MAX_DETAIL_LENGTH` characters. ``message`` is the exception's
    message as Python shows it (``str(exc)``, a traceback): like any exception's, it is never
    stored or logged by Caravel; left out, it is the safe detail.

    The attempt fails as any exception does (category ``HandlerFailed``), is retried by the
    job type's policy and dead-letters after the last attempt. The exception's class is stored
    as ``error_class``, so a subclass (``class ProviderDown(JobFailed)``) names the kind of
    failure as well. To keep the original exception for a debugger, chain it:
    ``raise JobFailed(safe_detail="provider answered 503") from exc``.
    """

    def __init__(self, message: str | None = None, *, safe_detail: str | None = None) -> None:
        self.safe_detail = _checked_detail(safe_detail)
        if message is None:
            message = safe_detail or ""
        super().__init__(message)


def _checked_detail(detail: object) -> str | None:
    if detail is not None and not isinstance(detail, str):
        raise ValidationError("safe_detail", "must be a string or None")
    return detail
