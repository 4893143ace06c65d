"""The statements over ``caravel_queue_starts``, the log of a rate-limited queue's starts that
its claims count within the window (:mod:`caravel.flow.window`)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from caravel.store.schema import queue_starts

__all__ = [
    "forget_starts",
    "latest_start",
    "log_starts",
    "prune_starts",
    "rate_used",
    "started_by_key",
]


def forget_starts() -> sa.Delete:
    """Delete ``b_queue``'s logged starts (its rate went)."""
    return sa.delete(queue_starts).where(queue_starts.c.queue == sa.bindparam("b_queue"))


def latest_start() -> sa.Select[Any]:
    """The time of ``b_queue``'s latest logged start (``NULL``: none)."""
    return sa.select(sa.func.max(queue_starts.c.started_at)).where(
        queue_starts.c.queue == sa.bindparam("b_queue")
    )


def prune_starts() -> sa.Delete:
    """Delete ``b_queue``'s starts at or before ``b_since``
    (:func:`~caravel.flow.window.stale_before`)."""
    return sa.delete(queue_starts).where(
        queue_starts.c.queue == sa.bindparam("b_queue"),
        queue_starts.c.started_at <= sa.bindparam("b_since", type_=sa.BigInteger()),
    )


def started_by_key() -> sa.Select[Any]:
    """The weights ``b_queue`` started later than ``b_since``, per key (``key``, ``weight``)."""
    return (
        sa.select(queue_starts.c.key, sa.func.sum(queue_starts.c.weight).label("weight"))
        .where(
            queue_starts.c.queue == sa.bindparam("b_queue"),
            queue_starts.c.started_at > sa.bindparam("b_since", type_=sa.BigInteger()),
        )
        .group_by(queue_starts.c.key)
    )


def rate_used() -> sa.Select[Any]:
    """The weights ``b_queue`` started later than ``b_since`` and at or before ``b_now``."""
    return sa.select(sa.func.coalesce(sa.func.sum(queue_starts.c.weight), 0)).where(
        queue_starts.c.queue == sa.bindparam("b_queue"),
        queue_starts.c.started_at > sa.bindparam("b_since", type_=sa.BigInteger()),
        queue_starts.c.started_at <= sa.bindparam("b_now", type_=sa.BigInteger()),
    )


def log_starts() -> sa.Insert:
    """Log the starts of one claim under one key (``b_queue``, ``b_key``, ``b_now``, and
    ``b_weight``, their summed weights: :func:`~caravel.flow.window.started_weights`); run once
    per key the claim started."""
    return sa.insert(queue_starts).values(
        queue=sa.bindparam("b_queue"),
        key=sa.bindparam("b_key"),
        started_at=sa.bindparam("b_now", type_=sa.BigInteger()),
        weight=sa.bindparam("b_weight", type_=sa.Integer()),
    )
