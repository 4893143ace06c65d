"""A queue's concurrency limits: how many of its jobs may run at once overall and per
partition key, and whether its jobs are claimed fairly across partition keys. A plain value,
checked when constructed, that the store keeps in ``caravel_queue_limits``."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from caravel.errors import ValidationError
from caravel.flow.fairness import check_weights
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
        fair: claim the queue's ready jobs round-robin across partition keys (fair dispatch,
            see ``docs/guides/flow-control.md``); ``False``: in the queue's usual order.
        weights: with ``fair``, how many jobs per round a partition key gets (1 to 1,000; a
            key not named gets 1), for at most 1,000 keys.

    At least one of ``concurrency``, ``per_key`` and ``fair`` is given. A job counts as running
    from its claim until its outcome is recorded or its lease expires, so a crashed worker's
    slots come back when its leases expire.
    """

    queue: str
    concurrency: int | None = None
    per_key: int | None = None
    fair: bool = False
    weights: Mapping[str, int] = dataclasses.field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        weights = check_limit(self.queue, self.concurrency, self.per_key, self.fair, self.weights)
        object.__setattr__(self, "weights", weights)


def check_limit(
    queue: object,
    concurrency: object,
    per_key: object,
    fair: object = False,
    weights: object = None,
) -> Mapping[str, int]:
    """The rules of :class:`ConcurrencyLimit`, for callers holding the parts (the store checks
    again what it is given); returns the weights, checked and read-only. Raises
    :class:`~caravel.errors.ValidationError`."""
    check_queue_name(queue)
    checked = check_weights(weights, fair)
    if concurrency is None and per_key is None and fair is not True:
        raise ValidationError(
            "concurrency", "give concurrency, per_key or fair (to remove a limit, clear it)"
        )
    for field, value in (("concurrency", concurrency), ("per_key", per_key)):
        if value is not None:
            check_int(field, value, 1, MAX_CONCURRENCY_LIMIT)
    return checked
