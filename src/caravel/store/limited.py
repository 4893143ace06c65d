"""Concurrency limits in the SQL stores: the statements over ``caravel_queue_limits``, the three
operations that run them, and the limited claim, shared by every dialect.

A limited claim runs in one transaction that first reads the queue's limits row, locked where
the database has concurrent writers (PostgreSQL: ``FOR UPDATE``; SQLite's ``BEGIN IMMEDIATE``
already makes every write wait its turn). So the limited claims of one queue take turns, each
counts the running jobs only after the one before it committed, and none can take a slot
another already took: the count and the claim are exact together. A queue without a row takes
no lock and is claimed by the plain statement; one whose row went since the worker looked is
claimed by the plain statement inside the transaction.

A fair queue's claims (``fair`` on its row) run the same way, with
:func:`~caravel.store.claims.claim_fair` as the statement: its weights are read by the claim
itself, so a change to them is kept by the next claim.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from caravel.errors import ValidationError
from caravel.flow.concurrency import ConcurrencyLimit, check_limit
from caravel.store import claims
from caravel.store.plans import Plan, Step
from caravel.store.protocol import ClaimRequest, ClaimSource, QueueLimit
from caravel.store.schema import queue_limits, queue_weights
from caravel.store.transactions import ConnectionT, SqlTransactions
from caravel.validation import check_queue_name

__all__ = [
    "LimitsStore",
    "checked_limit",
    "clear_limit",
    "clear_weights",
    "list_limits",
    "list_weights",
    "read_limit",
    "set_limit",
    "set_weights",
]


def checked_limit(limit: object) -> ConcurrencyLimit:
    """``limit`` when it is a :class:`ConcurrencyLimit` that keeps its rules (checked again: a
    frozen dataclass can still be forced); otherwise :class:`ValidationError`."""
    if not isinstance(limit, ConcurrencyLimit):
        raise ValidationError("limit", "must be a caravel.ConcurrencyLimit")
    check_limit(limit.queue, limit.concurrency, limit.per_key, limit.fair, limit.weights)
    return limit


def set_limit(insert: Any) -> Any:
    """Store ``b_queue``'s ``b_concurrency`` and ``b_per_key`` at ``b_now``, replacing what was
    there. ``insert`` is the dialect's ``insert(queue_limits)``."""
    values = insert.values(
        queue=sa.bindparam("b_queue", type_=queue_limits.c.queue.type),
        concurrency=sa.bindparam("b_concurrency", type_=sa.Integer()),
        per_key=sa.bindparam("b_per_key", type_=sa.Integer()),
        updated_at=sa.bindparam("b_now", type_=sa.BigInteger()),
        fair=sa.bindparam("b_fair", type_=sa.Boolean()),
    )
    return values.on_conflict_do_update(
        index_elements=[queue_limits.c.queue],
        set_={
            "concurrency": values.excluded.concurrency,
            "per_key": values.excluded.per_key,
            "updated_at": values.excluded.updated_at,
            "fair": values.excluded.fair,
        },
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


def clear_limit() -> Any:
    """Remove ``b_queue``'s limits; returns its name when it had any."""
    return (
        sa.delete(queue_limits)
        .where(queue_limits.c.queue == sa.bindparam("b_queue", type_=queue_limits.c.queue.type))
        .returning(queue_limits.c.queue)
    )


def list_limits() -> sa.Select[Any]:
    """Every queue's limits, by name."""
    return sa.select(queue_limits).order_by(queue_limits.c.queue)


def read_limit() -> sa.Select[Any]:
    """``b_queue``'s limits, if it has any."""
    return sa.select(queue_limits.c.concurrency, queue_limits.c.per_key, queue_limits.c.fair).where(
        queue_limits.c.queue == sa.bindparam("b_queue", type_=queue_limits.c.queue.type)
    )


def _row(row: Any, weights: dict[str, dict[str, int]]) -> QueueLimit:
    return QueueLimit(
        row.queue,
        row.concurrency,
        row.per_key,
        row.updated_at,
        bool(row.fair),
        weights.get(row.queue, {}),
    )


class LimitsStore(SqlTransactions[ConnectionT]):
    """The concurrency-limit operations of a SQL store (:class:`~caravel.store.base.SqlStore`
    has them)."""

    def _queue_limits_insert(self) -> Any:
        """The dialect's INSERT into ``caravel_queue_limits``, with ``on_conflict_do_update``."""
        raise NotImplementedError

    def _queue_changed(self) -> Sequence[Any]:
        """As :meth:`PausingStore._queue_changed <caravel.store.pausing.PausingStore>`: a
        limit's change is announced on the same channel."""
        return ()

    def _limit_lock(self, read: sa.Select[Any]) -> sa.Select[Any]:
        """The read of a queue's limits row that a limited claim starts with, locked so that
        the queue's limited claims take turns where the database has concurrent writers."""
        return read

    def _claim_statement(self, source: ClaimSource, *, literal_limit: bool = True) -> sa.Update:
        raise NotImplementedError

    def _claim_target(self, candidates: sa.Select[Any]) -> sa.ColumnElement[bool]:
        raise NotImplementedError

    #: How a fair claim reads each key's first jobs (:data:`~caravel.store.claims.KeyJobs`).
    _fair_key_jobs: claims.KeyJobs = staticmethod(claims.in_key_jobs)

    async def queue_limit_set(self, limit: ConcurrencyLimit, now: int) -> QueueLimit:
        limit = checked_limit(limit)
        stmt = self._statement("queue_limit_set", lambda: set_limit(self._queue_limits_insert()))
        params = {
            "b_queue": limit.queue,
            "b_concurrency": limit.concurrency,
            "b_per_key": limit.per_key,
            "b_now": now,
            "b_fair": limit.fair,
        }
        drop = self._statement("queue_weights_clear", clear_weights)
        weigh = self._statement("queue_weights_set", set_weights)
        weights = [
            {"b_queue": limit.queue, "b_key": key, "b_weight": weight}
            for key, weight in limit.weights.items()
        ]
        async with self._write("queue_limit_set") as conn:
            await conn.execute(stmt, params)
            await conn.execute(drop, {"b_queue": limit.queue})
            if weights:
                await conn.execute(weigh, weights)
            for announce in self._queue_changed():
                await conn.execute(announce, {"b_queue": limit.queue})
        return QueueLimit(
            limit.queue, limit.concurrency, limit.per_key, now, limit.fair, dict(limit.weights)
        )

    async def queue_limit_clear(self, queue: str, now: int) -> bool:
        check_queue_name(queue)
        stmt = self._statement("queue_limit_clear", clear_limit)
        drop = self._statement("queue_weights_clear", clear_weights)
        async with self._write("queue_limit_clear") as conn:
            await conn.execute(drop, {"b_queue": queue})
            cleared = (await conn.execute(stmt, {"b_queue": queue})).scalar_one_or_none()
            if cleared is not None:
                for announce in self._queue_changed():
                    await conn.execute(announce, {"b_queue": queue})
        return cleared is not None

    async def queue_limit_list(self) -> list[QueueLimit]:
        stmt = self._statement("queue_limit_list", list_limits)
        weighing = self._statement("queue_weights_list", list_weights)
        async with self._read("queue_limit_list") as conn:
            rows = (await conn.execute(stmt)).all()
            weights: dict[str, dict[str, int]] = {}
            for weight in (await conn.execute(weighing)).all():
                weights.setdefault(weight.queue, {})[weight.key] = weight.weight
        return [_row(row, weights) for row in rows]

    def _claim_limited(self, request: ClaimRequest, params: dict[str, Any]) -> Plan[list[Any]]:
        """The limited claim (see the module docstring) as a plan, for the dialect to run in
        one write transaction; ``params`` are the plain claim's. Its value: the claimed rows."""
        source = request.source
        lock = self._statement("limit_lock", lambda: self._limit_lock(read_limit()))
        found = yield Step(lock, {"b_queue": request.queue})
        concurrency, per_key, fair = (None, None, False) if not found else found[0]
        limit = request.limit
        if concurrency is not None:
            count = self._statement("running_count", claims.running_count)
            counted = yield Step(count, {"b_queue": params["b_queue"], "b_now": params["b_now"]})
            limit = min(limit, concurrency - int(counted[0][0]))
            if limit <= 0:
                return []
        params = {**params, "b_limit": limit}
        if per_key is not None:
            params["b_per_key"] = per_key
        if fair:
            keyed = per_key is not None
            stmt = self._statement(
                f"claim_fair_{source}_{keyed}",
                lambda: claims.claim_fair(
                    source, self._claim_target, self._fair_key_jobs, per_key=keyed
                ),
            )
        elif per_key is None:
            stmt = self._statement(f"claim_{source}", lambda: self._claim_statement(source))
        else:
            stmt = self._statement(
                f"claim_per_key_{source}", lambda: claims.claim_per_key(source, self._claim_target)
            )
        return (yield Step(stmt, params))
