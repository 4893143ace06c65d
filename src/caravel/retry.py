"""Retry backoff, computed in one place: the queue's retries after a failed attempt and the
outbox relay's retries of an envelope it could not deliver both double from a base delay up to a
cap."""

from __future__ import annotations

from datetime import timedelta

__all__ = ["exponential_backoff"]

_MICROSECOND = timedelta(microseconds=1)


def exponential_backoff(base: timedelta, cap: timedelta, attempt: int) -> timedelta:
    """The delay after failed attempt number ``attempt`` (1-based): ``base * 2 ** (attempt -
    1)``, never more than ``cap``. Computed in whole microseconds with Python integers, so no
    attempt number can overflow it."""
    exponent = max(0, attempt - 1)
    micros = min((base // _MICROSECOND) << min(exponent, 128), cap // _MICROSECOND)
    return timedelta(microseconds=micros)
