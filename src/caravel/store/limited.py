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
from dataclasses import replace
from typing import Any

import sqlalchemy as sa

from caravel.errors import ValidationError
from caravel.flow.concurrency import ConcurrencyLimit, check_limit
from caravel.jobs import JobState
from caravel.store import claims
from caravel.store.plans import Plan, Step
from caravel.store.protocol import (
    ClaimRequest,
    ClaimSource,
    KeyUsage,
    QueueLimit,
    QueueLimitUsage,
)
from caravel.store.schema import jobs, partition, queue_limits, queue_weights
from caravel.store.transactions import ConnectionT, SqlTransactions
from caravel.validation import check_int, check_queue_name

__all__ = [
    "MAX_USAGE_KEYS",
    "LimitsStore",
    "checked_limit",
    "checked_usage",
    "clear_limit",
    "clear_weights",
    "key_startable",
    "list_limits",
    "list_weights",
    "read_limit",
    "set_limit",
    "set_weights",
    "usage_by_key",
    "waiting",
]

#: The most partition keys :meth:`Store.queue_limit_usage` returns per queue.
MAX_USAGE_KEYS = 1000

RUNNING = JobState.RUNNING.value
READY = JobState.READY.value


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


def usage_by_key(per_key: int | None) -> sa.Select[Any]:
    """Per partition key of ``b_queue`` at ``b_now``: its jobs ``running`` with a lease
    unexpired, ``ready`` and due, and, under a cap of ``per_key`` (literal SQL: a statement per
    cap, as the stores cache statements by name), how many of those it lets start
    (``startable``); read from the rows the partial claim index holds."""
    now = sa.bindparam("b_now", type_=sa.BigInteger())
    is_running = sa.and_(jobs.c.state == RUNNING, jobs.c.available_at > now)
    is_ready = sa.and_(jobs.c.state == READY, jobs.c.due_at <= now)
    counted = (
        sa.select(
            partition.label("key"),
            sa.func.sum(sa.case((is_running, 1), else_=0)).label("running"),
            sa.func.sum(sa.case((is_ready, 1), else_=0)).label("ready"),
        )
        .where(
            jobs.c.queue == sa.bindparam("b_queue", type_=jobs.c.queue.type),
            jobs.c.available_at.is_not(None),
            sa.or_(is_running, is_ready),
        )
        .group_by(partition)
        .subquery("counted")
    )
    if per_key is None:
        startable: Any = counted.c.ready
    else:
        cap: Any = sa.literal_column(str(per_key))
        left = sa.case((counted.c.running >= cap, 0), else_=cap - counted.c.running)
        startable = sa.case((counted.c.ready < left, counted.c.ready), else_=left)
    return sa.select(
        counted.c.key, counted.c.running, counted.c.ready, startable.label("startable")
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
        async with self._read("queue_limit_list") as conn:
            return await self._limits(conn)

    async def _limits(self, conn: ConnectionT) -> list[QueueLimit]:
        """Every limits row with its queue's weights, read on ``conn``."""
        stmt = self._statement("queue_limit_list", list_limits)
        weighing = self._statement("queue_weights_list", list_weights)
        rows = (await conn.execute(stmt)).all()
        weights: dict[str, dict[str, int]] = {}
        for weight in (await conn.execute(weighing)).all():
            weights.setdefault(weight.queue, {})[weight.key] = weight.weight
        return [_row(row, weights) for row in rows]

    async def queue_limit_usage(
        self, queue: str | None, now: int, *, keys: int = 20
    ) -> list[QueueLimitUsage]:
        checked_usage(queue, keys)
        used = []
        async with self._read("queue_limit_usage", single=False) as conn:
            for limit in await self._limits(conn):
                if queue is None or limit.queue == queue:
                    used.append(await self._usage(conn, limit, now, keys))
        return used

    async def _usage(
        self, conn: ConnectionT, limit: QueueLimit, now: int, keys: int
    ) -> QueueLimitUsage:
        per_key = limit.per_key
        by_key = usage_by_key(per_key).subquery("by_key")
        params = {"b_queue": limit.queue, "b_now": now}
        total = sa.func.coalesce(sa.func.sum(by_key.c.running), 0)
        totals = self._statement(
            f"limit_usage_{per_key}",
            lambda: sa.select(
                total,
                sa.func.coalesce(sa.func.sum(by_key.c.ready), 0),
                sa.func.coalesce(sa.func.sum(by_key.c.startable), 0),
            ),
        )
        running, ready, startable = (int(n) for n in (await conn.execute(totals, params)).one())
        usage = QueueLimitUsage(limit, running, waiting(limit, running, ready, startable))
        if per_key is None or keys == 0:
            return usage
        key_waiting = (by_key.c.ready - by_key.c.startable).label("waiting")
        top = self._statement(
            f"limit_usage_keys_{per_key}",
            lambda: (
                sa.select(by_key.c.key, by_key.c.running, key_waiting)
                .where(sa.or_(by_key.c.running > 0, key_waiting > 0))
                .order_by(by_key.c.running.desc(), key_waiting.desc(), by_key.c.key)
                .limit(sa.bindparam("b_keys", type_=sa.Integer(), literal_execute=True))
            ),
        )
        rows = (await conn.execute(top, {**params, "b_keys": keys})).all()
        found = tuple(KeyUsage(row.key, int(row.running), int(row.waiting)) for row in rows)
        return replace(usage, keys=found)

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
