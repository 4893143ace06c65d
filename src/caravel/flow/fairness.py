"""Fair dispatch: a queue's ready jobs claimed round-robin across partition keys (tenants by
default), optionally weighted per key. The rules a queue's weights keep; the claim itself is
``caravel.store.claims.claim_fair`` (and its Python twin in the memory store).

A key's weight is how many of its jobs a claim round takes before the next key's turn: a key
of weight 2 gets two jobs per round to another's one. A key without a weight has weight 1.
A fair queue with a rate puts the due jobs its claim reads in the same order (:func:`fair_order`)
before the rate chooses among them.

Within a round, keys take their turns in key order starting after the queue's cursor, the key
its last claim served last (:func:`next_cursor`): so a worker claiming one job at a time, which
never has jobs of its own running when it claims, still goes round the keys instead of taking
the oldest job each time.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType

from caravel.errors import ValidationError
from caravel.validation import check_identifier, check_int

__all__ = [
    "MAX_KEY_WEIGHT",
    "MAX_WEIGHTS",
    "SHARE_SLACK",
    "check_weights",
    "comes_after",
    "fair_order",
    "next_cursor",
    "share",
]

#: The largest weight a partition key may have.
MAX_KEY_WEIGHT = 1000

#: How many partition keys of one queue may have a weight.
MAX_WEIGHTS = 1000

#: How many times its even share of the batch a fair claim reads of each key (:func:`share`):
#: room for keys with fewer jobs than their share, and for keys listed with none due yet.
SHARE_SLACK = 2


def check_weights(weights: object, fair: object) -> Mapping[str, int]:
    """``weights`` as a read-only mapping when it keeps the rules (a mapping of partition keys,
    checked as idempotency keys are, to integers from 1 to :data:`MAX_KEY_WEIGHT`, at most
    :data:`MAX_WEIGHTS` of them, given only with ``fair``); otherwise
    :class:`~caravel.errors.ValidationError` naming ``fair`` or ``weights``."""
    if not isinstance(fair, bool):
        raise ValidationError("fair", "must be True or False")
    if weights is None:
        return MappingProxyType({})
    if not isinstance(weights, Mapping):
        raise ValidationError("weights", "must be a mapping of partition keys to integers")
    if weights and not fair:
        raise ValidationError("weights", "apply only to a fair queue: give fair=True with them")
    if len(weights) > MAX_WEIGHTS:
        raise ValidationError("weights", f"must name at most {MAX_WEIGHTS} partition keys")
    checked: dict[str, int] = {}
    for key, weight in weights.items():
        checked[check_identifier(key, "weights")] = check_int("weights", weight, 1, MAX_KEY_WEIGHT)
    return MappingProxyType(dict(sorted(checked.items())))


def fair_order(
    due: Sequence[tuple[bool, str]],
    weights: Mapping[str, int],
    running: Mapping[str, int],
    cursor: str | None = None,
) -> list[int]:
    """The positions of ``due`` (each job: whether it is an expired lease, its partition key;
    given in claim order) in fair order: expired leases first, then ready jobs by round, a key
    of weight ``w`` taking ``w`` jobs per round and its ``running`` jobs counting into its
    rounds; within a round the keys after ``cursor`` first, in key order, then the others;
    within a key, claim order (as ``claims.claim_fair`` orders them)."""
    seen: Counter[str] = Counter()
    ranks: list[tuple[int, int, bool, str, int]] = []
    for at, (expired, key) in enumerate(due):
        if expired:
            ranks.append((0, 0, False, "", at))
            continue
        turn = (running.get(key, 0) + seen[key]) // weights.get(key, 1)
        ranks.append((1, turn, not comes_after(key, cursor), key, at))
        seen[key] += 1
    return [rank[-1] for rank in sorted(ranks)]


def comes_after(key: str, cursor: str | None) -> bool:
    """Whether ``key`` takes its turn in a round before the keys at or before ``cursor`` (the
    key the queue's last claim served last; ``None``: no claim yet)."""
    return cursor is None or key > cursor


def next_cursor(cursor: str | None, served: Iterable[str]) -> str | None:
    """The cursor after a claim that served the keys ``served`` with ``cursor``: the served
    key that came last in the round's order (the greatest at or before ``cursor``, or else the
    greatest after it). So claims of one job each go round every key with due work."""
    keys = set(served)
    if not keys:
        return cursor
    wrapped = [key for key in keys if not comes_after(key, cursor)]
    return max(wrapped) if wrapped else max(keys)


def share(limit: int, keys: int, weights: Mapping[str, int]) -> int:
    """How many of each key's first due jobs a fair claim of ``limit`` over ``keys`` keys with
    work reads: the batch's even share, rounded up, times the heaviest weight, times
    :data:`SHARE_SLACK`. A claim thus reads a small multiple of its batch whatever the backlog.
    Where most keys have fewer jobs than that, the claim can take fewer than ``limit`` while
    one key has more; the worker claims again at once (a limited claim that took something is
    followed by another), so the work still flows."""
    return -(-limit // max(keys, 1)) * max(weights.values(), default=1) * SHARE_SLACK
