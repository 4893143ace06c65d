"""What a handler can tell the worker besides "done" and "failed": run me again later
(:class:`Snooze`) or stop trying (:class:`Discard`).

They are exceptions so that a handler can raise them from any depth of its own code, as it
would raise any failure; the worker recognises them before treating an exception as a failed
attempt. Neither carries a message to store: a snooze carries its delay, a discard a short
category that is stored like the worker's own failure categories.
"""

from __future__ import annotations

import re
from datetime import timedelta

from caravel.errors import ValidationError
from caravel.jobs import FailureCategory
from caravel.limits import MAX_CATEGORY_LENGTH
from caravel.validation import check_duration

__all__ = ["MAX_SNOOZE_DELAY", "Discard", "Snooze"]

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
    ``.``, ``-`` or ``_``, starting with a letter. It is stored, so it must never hold data; a
    message has no place to go. The exception's class is stored as ``error_class``, so a
    subclass of :class:`Discard` can name the reason as well.
    """

    def __init__(self, category: str = FailureCategory.DISCARDED.value) -> None:
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
        super().__init__(category)
