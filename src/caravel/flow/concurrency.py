"""A queue's concurrency limits: how many of its jobs may run at once overall and per
partition key. A plain value, checked when constructed, that the store keeps in
``caravel_queue_limits``."""

from __future__ import annotations

from dataclasses import dataclass

from caravel.errors import ValidationError
from caravel.validation import check_int, check_queue_name

__all__ = ["MAX_CONCURRENCY_LIMIT", "ConcurrencyLimit", "check_limit"]

#: The largest limit a queue may have, overall or per key.
MAX_CONCURRENCY_LIMIT = 100_000


@dataclass(frozen=True, kw_only=True, slots=True)
class ConcurrencyLimit:
    """How many jobs of ``queue`` may run at once. Checked when constructed.

    Attributes:
        queue: the queue's name (1 to 64 characters of ``[a-z0-9._-]``).
        concurrency: at most this many of the queue's jobs run at once across every worker and
            host (1 to 100,000); ``None``: no overall cap.
        per_key: at most this many run at once per partition key (1 to 100,000); ``None``: no
            cap per key. A job's partition key is its tenant unless its type or its dispatch
            names another.

    At least one of ``concurrency`` and ``per_key`` is given. A job counts as running from its
    claim until its outcome is recorded or its lease expires, so a crashed worker's slots come
    back when its leases expire.
    """

    queue: str
    concurrency: int | None = None
    per_key: int | None = None

    def __post_init__(self) -> None:
        check_limit(self.queue, self.concurrency, self.per_key)


def check_limit(queue: object, concurrency: object, per_key: object) -> None:
    """The rules of :class:`ConcurrencyLimit`, for callers holding the parts (the store checks
    again what it is given). Raises :class:`~caravel.errors.ValidationError`."""
    check_queue_name(queue)
    if concurrency is None and per_key is None:
        raise ValidationError(
            "concurrency", "give concurrency, per_key or both (to remove a limit, clear it)"
        )
    for field, value in (("concurrency", concurrency), ("per_key", per_key)):
        if value is not None:
            check_int(field, value, 1, MAX_CONCURRENCY_LIMIT)
