"""The statements over a queue's stored settings: its row of ``caravel_queue_limits`` (caps,
rate, fairness and the fair cursor) and its rows of ``caravel_queue_weights``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from caravel.jobs import JobState
from caravel.store.protocol import LimitKind
from caravel.store.schema import jobs, queue_limits, queue_weights

__all__ = [
    "clear_limit",
    "clear_weights",
    "heaviest_waiting",
    "list_limits",
    "list_weights",
    "move_cursor",
    "read_limit",
    "read_weights",
    "set_limit",
    "set_weights",
]

WAITING = (JobState.READY.value, JobState.RUNNING.value)

_CONCURRENCY = ("concurrency", "per_key")
_RATE = ("rate", "rate_per_key", "rate_period_ms")


def set_limit(insert: Any, fields: Sequence[str]) -> Any:
    """Store ``b_queue``'s ``fields`` (each bound as ``b_<field>``) at ``b_now``, replacing
    those it had and keeping the others. ``insert`` is the dialect's ``insert(queue_limits)``."""
    values = insert.values(
        queue=sa.bindparam("b_queue", type_=queue_limits.c.queue.type),
        updated_at=sa.bindparam("b_now", type_=sa.BigInteger()),
        **{field: sa.bindparam(f"b_{field}", type_=queue_limits.c[field].type) for field in fields},
    )
    return values.on_conflict_do_update(
        index_elements=[queue_limits.c.queue],
        set_={name: getattr(values.excluded, name) for name in (*fields, "updated_at")},
    ).returning(*queue_limits.c)


def heaviest_waiting() -> sa.Select[Any]:
    """The largest weight among ``b_queue``'s ready and running jobs (``None``: none)."""
    return sa.select(sa.func.max(sa.func.coalesce(jobs.c.weight, 1))).where(
        jobs.c.queue == sa.bindparam("b_queue"), jobs.c.state.in_(WAITING)
    )


def clear_weights() -> sa.Delete:
    """Remove ``b_queue``'s weights."""
    return sa.delete(queue_weights).where(
        queue_weights.c.queue == sa.bindparam("b_queue", type_=queue_weights.c.queue.type)
    )


def set_weights() -> sa.Insert:
    """One weight of ``b_queue``: ``b_key`` gets ``b_weight`` (run once per weight)."""
    return sa.insert(queue_weights).values(
        queue=sa.bindparam("b_queue", type_=queue_weights.c.queue.type),
        key=sa.bindparam("b_key", type_=queue_weights.c.key.type),
        weight=sa.bindparam("b_weight", type_=sa.Integer()),
    )


def list_weights() -> sa.Select[Any]:
    """Every fair queue's weights, by queue and key."""
    return sa.select(queue_weights).order_by(queue_weights.c.queue, queue_weights.c.key)


def read_weights() -> sa.Select[Any]:
    """``b_queue``'s weights (``key``, ``weight``)."""
    return sa.select(queue_weights.c.key, queue_weights.c.weight).where(
        queue_weights.c.queue == sa.bindparam("b_queue", type_=queue_weights.c.queue.type)
    )


def _holds(kind: LimitKind) -> sa.ColumnElement[bool]:
    """Whether a row holds limits of ``kind`` (``concurrency``: caps or fairness)."""
    if kind == "rate":
        return queue_limits.c.rate_period_ms.isnot(None)
    return sa.or_(
        queue_limits.c.concurrency.isnot(None),
        queue_limits.c.per_key.isnot(None),
        queue_limits.c.fair,
    )


def clear_limit(kind: LimitKind = "all") -> tuple[Any, ...]:
    """The statements that remove ``b_queue``'s limits of ``kind``: each returns the queue's
    name when it removed something (a row left without any limit goes)."""
    queue = queue_limits.c.queue == sa.bindparam("b_queue", type_=queue_limits.c.queue.type)
    if kind == "all":
        return (sa.delete(queue_limits).where(queue).returning(queue_limits.c.queue),)
    kept_kind: LimitKind = "rate" if kind == "concurrency" else "concurrency"
    had, keeps = _holds(kind), _holds(kept_kind)
    cleared: dict[str, Any] = (
        {**dict.fromkeys(_CONCURRENCY), "fair": False}
        if kind == "concurrency"
        else dict.fromkeys(_RATE)
    )
    return (
        sa.delete(queue_limits).where(queue, had, sa.not_(keeps)).returning(queue_limits.c.queue),
        sa.update(queue_limits)
        .where(queue, had)
        .values({**cleared, "updated_at": sa.bindparam("b_now")})
        .returning(queue_limits.c.queue),
    )


def list_limits() -> sa.Select[Any]:
    """Every queue's limits, by name."""
    return sa.select(queue_limits).order_by(queue_limits.c.queue)


def read_limit() -> sa.Select[Any]:
    """``b_queue``'s limits, if it has any, and whether it has weights (``weighted``)."""
    queue = sa.bindparam("b_queue", type_=queue_limits.c.queue.type)
    weighted = sa.exists().where(queue_weights.c.queue == queue)
    return sa.select(
        queue_limits.c.concurrency,
        queue_limits.c.per_key,
        queue_limits.c.rate,
        queue_limits.c.rate_per_key,
        queue_limits.c.rate_period_ms,
        queue_limits.c.fair,
        queue_limits.c.fair_cursor,
        weighted.label("weighted"),
    ).where(queue_limits.c.queue == queue)


def move_cursor() -> sa.Update:
    """Set ``b_queue``'s fair cursor to ``b_cursor``."""
    return (
        sa.update(queue_limits)
        .where(queue_limits.c.queue == sa.bindparam("b_queue"))
        .values(fair_cursor=sa.bindparam("b_cursor"))
    )
