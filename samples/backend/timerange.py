"""Server time and the ``from``/``to`` reporting window of the counter API.

Times are whole milliseconds since the Unix epoch (UTC). A window includes ``from`` and excludes
``to``; it must be longer than zero and at most 31 days. Without either bound it is the 24 hours
ending now; with only ``to`` it starts 24 hours before ``to``; with only ``from`` it ends now.
Both bounds must be written in UTC, with ``Z`` or ``+00:00``, and lie from 1970-01-01T00:00:00Z
up to (not including) 9999-01-01T00:00:00Z: outside that the answer is a 400 naming the bound.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

DEFAULT_SPAN = timedelta(hours=24)
MAX_SPAN = timedelta(days=31)
_MS = timedelta(milliseconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: The latest bound accepted (exclusive): far enough from datetime's end that the default 24
#: hours, rounding and nanoseconds never overflow it.
_LATEST = datetime(9999, 1, 1, tzinfo=UTC)

#: A full date and time (seconds, optional fraction) followed by an explicit UTC offset.
UTC_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|\+00:00)$"
_UTC_TIMESTAMP = re.compile(UTC_PATTERN, re.ASCII)


class TimeRangeError(ValueError):
    """The window's bounds are malformed, not UTC, reversed, empty or too long."""


def now_ms() -> int:
    """The server's current time, in whole milliseconds (rounded down)."""
    return time.time_ns() // 1_000_000


def to_datetime(ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=ms)


def _ceil_ms(moment: datetime) -> int:
    delta = moment - _EPOCH
    whole, rest = divmod(delta, _MS)
    return int(whole) + (1 if rest else 0)


def parse_utc(text: str, name: str) -> int:
    """A UTC timestamp as milliseconds, rounded up (so a bound never admits a result recorded
    before it)."""
    if not _UTC_TIMESTAMP.fullmatch(text):
        raise TimeRangeError(
            f"{name} must be a UTC date and time such as 2026-09-28T00:00:00Z or +00:00"
        )
    fraction = re.search(r"\.(\d+)", text)
    base = re.sub(r"\.\d+", "", text).replace("Z", "+00:00")
    try:
        moment = datetime.fromisoformat(base)
    except ValueError:
        raise TimeRangeError(f"{name} is not a valid date and time") from None
    if not _EPOCH <= moment < _LATEST:
        raise TimeRangeError(
            f"{name} must be from 1970-01-01T00:00:00Z and before 9999-01-01T00:00:00Z"
        )
    if fraction is not None:  # fromisoformat keeps at most microseconds; keep nanoseconds honest
        digits = fraction.group(1).ljust(9, "0")
        moment += timedelta(microseconds=int(digits[:6]))
        if int(digits[6:]):
            moment += timedelta(microseconds=1)
    return _ceil_ms(moment)


@dataclass(frozen=True, slots=True)
class Window:
    start_ms: int
    end_ms: int


def resolve(start: str | None, end: str | None, *, now: int) -> Window:
    """The window for the given query values (either may be missing)."""
    end_ms = parse_utc(end, "to") if end is not None else now + 1
    default_start = end_ms - int(DEFAULT_SPAN / _MS)
    start_ms = parse_utc(start, "from") if start is not None else default_start
    if end_ms <= start_ms:
        raise TimeRangeError("to must be later than from")
    if end_ms - start_ms > int(MAX_SPAN / _MS):
        raise TimeRangeError("the window from..to must be at most 31 days")
    return Window(start_ms, end_ms)
