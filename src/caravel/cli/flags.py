"""Saying an option error in the words the operator typed: the flag (``--lease-duration``), not
the library field behind it (``lease_duration``), and seconds, since every duration flag takes
seconds."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import timedelta

from caravel.errors import ValidationError

__all__ = ["FlagError", "flag_message", "seconds"]


class FlagError(ValueError):
    """A flag's value cannot be used; the message names the flag."""


def seconds(flag: str, value: float) -> timedelta:
    """``value`` seconds as a timedelta; a :class:`FlagError` for nan, infinities and values
    too large for one (which the range checks would never see)."""
    if not math.isfinite(value):
        raise FlagError(f"{flag} must be a finite number of seconds")
    try:
        return timedelta(seconds=value)
    except OverflowError:
        raise FlagError(f"{flag} is too large") from None


def flag_message(exc: ValidationError, flags: Mapping[str, str]) -> str:
    """``exc`` with every field named in ``flags`` replaced by its flag, in the field's place
    and inside the rule (``at most half of lease_duration``); a field that is already a flag
    (``--completed``) without the colon; as it is for other fields."""
    if exc.field.startswith("--"):
        return f"{exc.field} {exc.rule}"
    if exc.field not in flags:
        return str(exc)
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, flags)) + r")\b")
    rule = pattern.sub(lambda m: flags[m.group(1)], exc.rule)
    return f"{flags.get(exc.field, exc.field)} {rule}"
