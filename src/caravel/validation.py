"""The rules every queue name, wire name, tenant id, idempotency key and due time must follow.

Each check raises :class:`~caravel.errors.ValidationError` naming the field and the rule, and never
echoes the value (it may be private).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TypeVar

from caravel.clock import MAX_MS, MIN_MS, to_ms_ceil
from caravel.errors import ValidationError
from caravel.limits import (
    MAX_ATTEMPTS,
    MAX_JSON_DEPTH,
    MAX_KEY_LENGTH,
    MAX_QUEUE_NAME_LENGTH,
    MAX_SCHEDULE_NAME_LENGTH,
    MAX_TIMEOUT_DAYS,
    MAX_WIRE_NAME_LENGTH,
)

__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_KEY_LENGTH",
    "MAX_QUEUE_NAME_LENGTH",
    "MAX_WIRE_NAME_LENGTH",
    "bounded_list",
    "check_duration",
    "check_identifier",
    "check_int",
    "check_max_attempts",
    "check_not_before",
    "check_queue_name",
    "check_schedule_name",
    "check_text",
    "check_timeout",
    "check_wire_name",
]

T = TypeVar("T")

_NAME = re.compile(r"[a-z0-9._-]+")
_SCHEDULE_NAME = re.compile(r"[a-z0-9._-]{1,64}")
# C0 and C1 control characters, plus DEL.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _check_name(field: str, value: object, limit: int) -> str:
    if not isinstance(value, str):
        raise ValidationError(field, "must be a string")
    if not value or len(value) > limit or _NAME.fullmatch(value) is None:
        raise ValidationError(
            field,
            f"must be 1 to {limit} characters of lowercase letters, digits, '.', '-' or '_'",
        )
    return value


def check_schedule_name(value: object, field: str = "name") -> str:
    """A schedule's name: 1 to 64 of ``a-z 0-9 . _ -``; otherwise :class:`ValidationError`."""
    if not isinstance(value, str) or _SCHEDULE_NAME.fullmatch(value) is None:
        raise ValidationError(
            field, f"must be 1 to {MAX_SCHEDULE_NAME_LENGTH} characters of a-z, 0-9, '.', '_', '-'"
        )
    return value


def check_queue_name(value: object, field: str = "queue") -> str:
    """A queue name: 1 to 64 characters of ``[a-z0-9._-]``."""
    return _check_name(field, value, MAX_QUEUE_NAME_LENGTH)


def check_wire_name(value: object, field: str = "wire_name") -> str:
    """A job type's persisted wire name: 1 to 128 characters of ``[a-z0-9._-]``."""
    return _check_name(field, value, MAX_WIRE_NAME_LENGTH)


def check_identifier(value: object, field: str) -> str:
    """A tenant id or idempotency key: nonblank, at most 128 characters, no control characters.

    The value is kept exactly as given (no trimming, no case folding): lookups are exact.
    """
    # The common case, checked at once: printable ASCII has no control characters and is valid
    # Unicode.
    if (
        isinstance(value, str)
        and value.isascii()
        and value.isprintable()
        and len(value) <= MAX_KEY_LENGTH
        and value.strip()
    ):
        return value
    if not isinstance(value, str):
        raise ValidationError(field, "must be a string")
    if not value.strip():
        raise ValidationError(field, "must not be blank")
    if len(value) > MAX_KEY_LENGTH:
        raise ValidationError(field, f"must be at most {MAX_KEY_LENGTH} characters")
    if _CONTROL.search(value) is not None:
        raise ValidationError(field, "must not contain control characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(field, "must be valid Unicode text (no lone surrogates)") from None
    return value


def check_text(value: object, field: str, limit: int) -> str:
    """A short text shown to operators (a progress note): a string of at most ``limit``
    characters, no control characters, valid Unicode; it may be empty."""
    if not isinstance(value, str):
        raise ValidationError(field, "must be a string")
    if len(value) > limit:
        raise ValidationError(field, f"must be at most {limit} characters")
    if _CONTROL.search(value) is not None:
        raise ValidationError(field, "must not contain control characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(field, "must be valid Unicode text (no lone surrogates)") from None
    return value


def check_not_before(value: object, field: str = "not_before") -> datetime:
    """A due time: an aware :class:`~datetime.datetime`. Naive datetimes are rejected because
    their zone is a guess."""
    if not isinstance(value, datetime):
        raise ValidationError(field, "must be a datetime")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError(field, "must be timezone-aware (naive datetimes are rejected)")
    try:
        ms = to_ms_ceil(value)
    except OverflowError:
        ms = None
    if ms is None or not (MIN_MS <= ms <= MAX_MS):
        raise ValidationError(
            field, "must fall between years 1 and 9999 in UTC, to the millisecond"
        )
    return value


def check_max_attempts(value: object, field: str = "max_attempts") -> int:
    """A per-job attempt budget: an integer from 1 to 100."""
    return check_int(field, value, 1, MAX_ATTEMPTS)


def check_int(
    field: str,
    value: object,
    low: int,
    high: int,
    *,
    error: type[ValidationError] = ValidationError,
) -> int:
    """An integer (never a bool) from ``low`` to ``high``; otherwise ``error(field, rule)``."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise error(field, f"must be an integer from {low} to {high}")
    return value


def check_duration(
    field: str,
    value: object,
    low: timedelta,
    high: timedelta,
    rule: str,
    *,
    error: type[ValidationError] = ValidationError,
) -> timedelta:
    """A :class:`~datetime.timedelta` from ``low`` to ``high``; otherwise ``error(field, ...)``
    with ``rule`` (which says the range in words, such as "must be from 1 second to 1 hour")."""
    if not isinstance(value, timedelta):
        raise error(field, "must be a datetime.timedelta")
    if not low <= value <= high:
        raise error(field, rule)
    return value


def check_timeout(
    value: object, field: str = "timeout", *, error: type[ValidationError] = ValidationError
) -> timedelta:
    """An execution timeout: a :class:`~datetime.timedelta` from 1 millisecond to 7 days."""
    return check_duration(
        field,
        value,
        timedelta(milliseconds=1),
        timedelta(days=MAX_TIMEOUT_DAYS),
        f"must be from 1 millisecond to {MAX_TIMEOUT_DAYS} days",
        error=error,
    )


def bounded_list(field: str, items: Iterable[T], low: int, high: int, rule: str) -> list[T]:
    """``items`` as a list of ``low`` to ``high`` elements, else ``ValidationError(field, rule)``.
    At most ``high + 1`` elements are read: an iterator far longer than allowed (or endless) is
    refused without being drained."""
    try:
        iterator = iter(items)
    except TypeError:  # not iterable at all
        raise ValidationError(field, rule) from None
    taken = list(itertools.islice(iterator, high + 1))
    if not low <= len(taken) <= high:
        raise ValidationError(field, rule)
    return taken
