"""The store protocol's values about queue limits (:mod:`caravel.store.protocol`): a queue's
stored limits (:class:`QueueLimit`), how it stands against them (:class:`QueueLimitUsage`, with
a :class:`KeyUsage` per partition key), and which of them an operation means
(:data:`LimitKind`). Plain values, as those of :mod:`caravel.store.values`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["KeyUsage", "LimitKind", "QueueLimit", "QueueLimitUsage"]


#: Which of a queue's limits an operation means: its concurrency caps, its rates, or both.
LimitKind = Literal["all", "concurrency", "rate"]


@dataclass(frozen=True, slots=True)
class QueueLimit:
    """A queue's stored limits, as last set at ``updated_at`` (ms). Concurrency (see
    :class:`~caravel.flow.ConcurrencyLimit`): at most ``concurrency`` of its jobs running at
    once and ``per_key`` per partition key, whether it is claimed fairly across partition keys
    and with which ``weights``. Rate (see :class:`~caravel.flow.RateLimit`): starts weighing at
    most ``rate`` within any window of ``rate_period_ms``, and ``rate_per_key`` per key.
    ``None``: no such cap (``rate_period_ms`` is ``None`` exactly when there is no rate)."""

    queue: str
    concurrency: int | None
    per_key: int | None
    updated_at: int
    rate: int | None = None
    rate_per_key: int | None = None
    rate_period_ms: int | None = None
    fair: bool = False
    weights: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class KeyUsage:
    """One partition key of a queue with a per-key limit, at one moment: ``running`` of its
    jobs run with a lease unexpired, and ``waiting`` of its ready, due jobs cannot start now
    because the key is at its ``per_key`` cap (its ready jobs beyond the slots the cap leaves)."""

    key: str
    running: int
    waiting: int


@dataclass(frozen=True, slots=True)
class QueueLimitUsage:
    """How a limited queue stands against its limits at one moment.

    ``running``: its jobs running with a lease unexpired (what the claim counts against
    ``concurrency``). ``waiting``: its ready, due jobs that no claim could start now because of
    a limit: all of them less those that could start, where what could start is the smaller of
    the overall cap's free slots (``concurrency - running``, never below zero; unbounded
    without that cap) and the sum over keys of what each key's cap leaves (``per_key`` less the
    key's running jobs, at most its ready jobs; all ready jobs without that cap). ``keys``: with
    a per-key cap, the keys with jobs running or waiting, the most running first (then the most
    waiting, then by key), at most as many as asked for. ``rate_used``: with a rate, the weights
    of the starts its claims logged within the window that ends now, ``(now - period, now]``
    (what the next claim counts against ``rate``); ``None`` without a rate."""

    limit: QueueLimit
    running: int
    waiting: int
    keys: tuple[KeyUsage, ...] = ()
    rate_used: int | None = None
