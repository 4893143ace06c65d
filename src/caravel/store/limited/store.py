"""The limit operations of a SQL store: ``queue_limit_set``, ``queue_limit_clear``,
``queue_limit_list`` and ``queue_limit_usage``, and the hook the claim runs the limited claim
through."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import sqlalchemy as sa

from caravel._failpoints import failpoint
from caravel.errors import ValidationError
from caravel.flow.concurrency import ConcurrencyLimit
from caravel.flow.rate import RateLimit
from caravel.store import claims
from caravel.store.limited.claim import limited_claim
from caravel.store.limited.rules import (
    check_rate_fits,
    checked_limit,
    checked_usage,
    stored_fields,
    waiting,
)
from caravel.store.limited.starts import forget_starts, rate_used
from caravel.store.limited.tables import (
    clear_limit,
    clear_weights,
    heaviest_waiting,
    list_limits,
    list_weights,
    read_weights,
    set_limit,
    set_weights,
)
from caravel.store.limited.usage import usage_by_key
from caravel.store.plans import Plan
from caravel.store.protocol import (
    ClaimRequest,
    ClaimSource,
    KeyUsage,
    LimitKind,
    QueueLimit,
    QueueLimitUsage,
)
from caravel.store.transactions import ConnectionT, SqlTransactions
from caravel.validation import check_queue_name

__all__ = ["LimitsStore"]


def _row(row: Any, weights: dict[str, dict[str, int]]) -> QueueLimit:
    return QueueLimit(
        row.queue,
        row.concurrency,
        row.per_key,
        row.updated_at,
        row.rate,
        row.rate_per_key,
        row.rate_period_ms,
        bool(row.fair),
        weights.get(row.queue, {}),
    )


class LimitsStore(SqlTransactions[ConnectionT]):
    """The limit operations of a SQL store (:class:`~caravel.store.base.SqlStore`
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

    def _claim_statement(
        self, source: ClaimSource, *, literal_limit: bool = True, unlimited: bool = True
    ) -> Any:
        raise NotImplementedError

    def _claim_target(self, candidates: sa.Select[Any]) -> sa.ColumnElement[bool]:
        raise NotImplementedError

    #: How a fair claim reads each key's first jobs (:data:`~caravel.store.claims.KeyJobs`).
    _fair_key_jobs: claims.KeyJobs = staticmethod(claims.in_key_jobs)

    #: A rated claim that logs its starts itself, where the dialect can (see
    #: :class:`~caravel.store.limited.claim.ClaimingStore`).
    _claim_logging_starts: Callable[[sa.Update], sa.Select[Any]] | None = None
    #: A fair claim that moves its cursor itself, where the dialect can (as above).
    _claim_moving_cursor: Callable[[sa.Update], sa.Select[Any]] | None = None

    async def queue_limit_set(self, limit: ConcurrencyLimit | RateLimit, now: int) -> QueueLimit:
        limit = checked_limit(limit)
        fields = stored_fields(limit)
        kind = "rate" if isinstance(limit, RateLimit) else "concurrency"
        stmt = self._statement(
            f"queue_limit_set_{kind}", lambda: set_limit(self._queue_limits_insert(), list(fields))
        )
        params: dict[str, Any] = {f"b_{name}": value for name, value in fields.items()}
        params.update(b_queue=limit.queue, b_now=now)
        # Workers store their registry's limits as they start, while others claim under them:
        # a transaction the database picked as a deadlock's victim changed nothing, and is run
        # again (the same values set again are the same row).
        return await self._deadlock_retried(lambda: self._set_limit(limit, stmt, params))

    async def _set_limit(
        self, limit: ConcurrencyLimit | RateLimit, stmt: Any, params: dict[str, Any]
    ) -> QueueLimit:
        async with self._write("queue_limit_set") as conn:
            if isinstance(limit, RateLimit):
                heaviest = self._statement("heaviest_waiting", heaviest_waiting)
                weight = (await conn.execute(heaviest, {"b_queue": limit.queue})).scalar()
                check_rate_fits(limit, weight)
            row = (await conn.execute(stmt, params)).one()
            if isinstance(limit, ConcurrencyLimit):
                drop = self._statement("queue_weights_clear", clear_weights)
                await conn.execute(drop, {"b_queue": limit.queue})
                weights = dict(limit.weights)
                if weights:
                    weigh = self._statement("queue_weights_set", set_weights)
                    await conn.execute(
                        weigh,
                        [
                            {"b_queue": limit.queue, "b_key": key, "b_weight": weight}
                            for key, weight in weights.items()
                        ],
                    )
            else:
                read = self._statement("queue_weights_read", read_weights)
                found = (await conn.execute(read, {"b_queue": limit.queue})).all()
                weights = {found_row.key: int(found_row.weight) for found_row in found}
            for announce in self._queue_changed():
                await conn.execute(announce, {"b_queue": limit.queue})
        return _row(row, {limit.queue: weights})

    async def queue_limit_clear(self, queue: str, now: int, kind: LimitKind = "all") -> bool:
        check_queue_name(queue)
        if kind not in ("all", "concurrency", "rate"):
            raise ValidationError("kind", "must be 'all', 'concurrency' or 'rate'")
        stmts = self._statement(f"queue_limit_clear_{kind}", lambda: clear_limit(kind))
        cleared = False
        async with self._write("queue_limit_clear") as conn:
            if kind != "rate":
                drop = self._statement("queue_weights_clear", clear_weights)
                await conn.execute(drop, {"b_queue": queue})
            for stmt in stmts:
                done = await conn.execute(stmt, {"b_queue": queue, "b_now": now})
                cleared = done.scalar_one_or_none() is not None or cleared
            if cleared:
                if kind != "concurrency":
                    forget = self._statement("forget_starts", forget_starts)
                    await conn.execute(forget, {"b_queue": queue})
                for announce in self._queue_changed():
                    await conn.execute(announce, {"b_queue": queue})
        return cleared

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
        if limit.rate_period_ms is not None:
            used = self._statement("rate_used", rate_used)
            window = {**params, "b_since": now - limit.rate_period_ms}
            usage = replace(usage, rate_used=int((await conn.execute(used, window)).scalar_one()))
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
        """The limited claim (:func:`~caravel.store.limited.claim.limited_claim`) as a plan,
        for the dialect to run in one write transaction; ``params`` are the plain claim's."""
        claimed = yield from limited_claim(self, request, params)
        if claimed:  # the fault tests pause a worker here, the limits row locked
            failpoint("limited_claim_before_commit")
        return claimed
