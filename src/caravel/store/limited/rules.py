"""The rules the limit operations of every store keep (SQL and memory alike): which limits may
be stored, which columns each sets, what a usage read may ask for, and how many of a queue's
due jobs wait because of its caps."""

from __future__ import annotations

from caravel.errors import ValidationError
from caravel.flow.concurrency import ConcurrencyLimit, check_limit
from caravel.flow.rate import RateLimit, check_rate
from caravel.store.protocol import QueueLimit
from caravel.validation import check_int, check_queue_name

__all__ = [
    "MAX_USAGE_KEYS",
    "check_rate_fits",
    "checked_limit",
    "checked_usage",
    "key_startable",
    "stored_fields",
    "waiting",
]

#: The most partition keys :meth:`Store.queue_limit_usage` returns per queue.
MAX_USAGE_KEYS = 1000


def checked_limit(limit: object) -> ConcurrencyLimit | RateLimit:
    """``limit`` when it is a :class:`ConcurrencyLimit` or a :class:`RateLimit` that keeps its
    rules (checked again: a frozen dataclass can still be forced); otherwise
    :class:`ValidationError`."""
    if isinstance(limit, ConcurrencyLimit):
        check_limit(limit.queue, limit.concurrency, limit.per_key, limit.fair, limit.weights)
    elif isinstance(limit, RateLimit):
        check_rate(limit.queue, limit.rate, limit.per_key, limit.period)
    else:
        raise ValidationError("limit", "must be a caravel.ConcurrencyLimit or caravel.RateLimit")
    return limit


def stored_fields(limit: ConcurrencyLimit | RateLimit) -> dict[str, int | bool | None]:
    """The columns of ``caravel_queue_limits`` that ``limit`` sets (the others stay): a
    concurrency limit's fairness is of its kind (its weights are stored beside it)."""
    if isinstance(limit, ConcurrencyLimit):
        return {"concurrency": limit.concurrency, "per_key": limit.per_key, "fair": limit.fair}
    return {"rate": limit.rate, "rate_per_key": limit.per_key, "rate_period_ms": limit.period_ms}


def check_rate_fits(limit: RateLimit, heaviest: int | None) -> None:
    """Refuse a rate below the weight of a job waiting in its queue: such a job could never
    start. Raises :class:`ValidationError` naming ``rate`` or ``per_key``."""
    if heaviest is None:
        return
    for field, value in (("rate", limit.rate), ("per_key", limit.per_key)):
        if value is not None and value < heaviest:
            raise ValidationError(
                field, f"must be at least {heaviest}, the weight of a job waiting in the queue"
            )


def checked_usage(queue: object, keys: object) -> None:
    """The rules of :meth:`Store.queue_limit_usage`'s arguments: ``queue`` ``None`` or a queue
    name, ``keys`` from 0 to :data:`MAX_USAGE_KEYS`; otherwise :class:`ValidationError`."""
    if queue is not None:
        check_queue_name(queue)
    check_int("keys", keys, 0, MAX_USAGE_KEYS)


def key_startable(per_key: int | None, running: int, ready: int) -> int:
    """How many of a key's ``ready`` due jobs its cap lets start now, beside its ``running``."""
    if per_key is None:
        return ready
    return min(ready, max(0, per_key - running))


def waiting(limit: QueueLimit, running: int, ready: int, startable: int) -> int:
    """How many of a queue's ``ready`` due jobs wait because of ``limit``, ``startable`` of
    them being what the per-key cap leaves (summed over keys; ``ready`` without that cap)."""
    if limit.concurrency is not None:
        startable = min(startable, max(0, limit.concurrency - running))
    return ready - startable
