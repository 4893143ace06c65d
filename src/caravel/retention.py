"""Retention: how long finished jobs are kept, and the tombstone a pruned keyed job leaves.

Off by default: a :class:`Retention` whose ages are all ``None`` keeps everything for ever, as
the queue always has. A pruned job without an idempotency key is deleted; one with a key is
compacted into a tombstone (its payload replaced by :func:`content_hash` of its type and
payload), so its entry in the idempotency index keeps settling repeats and conflicts until
``keys`` has passed too.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import timedelta

from caravel.errors import OptionsError, ValidationError
from caravel.validation import check_duration

__all__ = [
    "DEFAULT_PRUNE_BATCH",
    "DEFAULT_PRUNE_PAUSE",
    "MAX_PRUNE_BATCH",
    "Retention",
    "content_hash",
    "parse_age",
]

#: Rows one prune batch touches at most by default, and at most at all: one batch is one short
#: transaction, so a pruner never holds locks for long.
DEFAULT_PRUNE_BATCH = 1_000
MAX_PRUNE_BATCH = 10_000
#: Between two batches: room for claims and acknowledgements (see caravel.prune.prune).
DEFAULT_PRUNE_PAUSE = timedelta(milliseconds=150)

_MIN_AGE = timedelta(seconds=1)
_MAX_AGE = timedelta(days=36_500)
_AGES = ("completed", "cancelled", "dead_letter", "keys")


@dataclass(frozen=True, kw_only=True, slots=True)
class Retention:
    """How long finished jobs stay before a prune removes them, per end state.

    Attributes:
        completed: age (since the job finished) after which completed jobs go.
        cancelled: the same for cancelled jobs.
        dead_letter: the same for dead letters (keep these long: they wait for a replay).
        keys: how long a pruned keyed job's tombstone is kept (since it was pruned). Once it
            is deleted, duplicate protection for that key ends: the key can be used again.

    Each is ``None`` (keep for ever, the default) or from 1 second to 100 years.
    """

    completed: timedelta | None = None
    cancelled: timedelta | None = None
    dead_letter: timedelta | None = None
    keys: timedelta | None = None

    def __post_init__(self) -> None:
        for name in _AGES:
            age = getattr(self, name)
            if age is not None:
                check_duration(
                    name, age, _MIN_AGE, _MAX_AGE, "must be from 1 second to 100 years (or None)",
                    error=OptionsError,
                )  # fmt: skip

    @property
    def enabled(self) -> bool:
        """Whether this policy removes anything at all."""
        return any(getattr(self, name) is not None for name in _AGES)


def content_hash(job_type: str, payload: str) -> str:
    """The SHA-256 (hex) of a job's type and payload: what a tombstone keeps of its content.
    The type's length in UTF-8 bytes comes first, so no two (type, payload) pairs share an
    encoding."""
    kind = job_type.encode()
    digest = hashlib.sha256(b"%d:" % len(kind))
    digest.update(kind)
    digest.update(payload.encode())
    return digest.hexdigest()


_AGE = re.compile(r"^(\d+)([smhd]?)$")
_UNITS = {"": "seconds", "s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def parse_age(field: str, text: str | None) -> timedelta | None:
    """An age as operators type it: ``7d``, ``12h``, ``30m``, ``90s`` or a bare number of
    seconds; ``None`` or an empty text for none."""
    if text is None or not text.strip():
        return None
    found = _AGE.match(text.strip())
    if found is None:
        raise ValidationError(field, "must be a whole number with an optional unit s, m, h or d")
    try:
        return timedelta(**{_UNITS[found.group(2)]: int(found.group(1))})
    except OverflowError:
        raise ValidationError(field, "is too large") from None
