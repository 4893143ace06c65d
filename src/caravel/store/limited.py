"""Concurrency and rate limits in the SQL stores: the statements over ``caravel_queue_limits``
and ``caravel_queue_starts``, the three operations that run them, and the limited claim, shared
by every dialect.

A limited claim runs in one transaction that first reads the queue's limits row, locked where
the database has concurrent writers (PostgreSQL: ``FOR UPDATE``; SQLite's ``BEGIN IMMEDIATE``
already makes every write wait its turn). So the limited claims of one queue take turns, each
counts the running jobs only after the one before it committed, and none can take a slot
another already took: the count and the claim are exact together. A queue without a row takes
no lock and is claimed by the plain statement; one whose row went since the worker looked is
claimed by the plain statement inside the transaction.

A queue with a rate is claimed in the same turn by three reads and a write: the running jobs
per partition key, the weights started per key later than ``now - period`` (after deleting the
starts a period older than the latest), the first due jobs with their keys and weights;
:func:`caravel.flow.window.fit` chooses among them, the chosen still due are claimed, and one
start per job now running is logged at ``now``. ``now`` is the claim's clock or the latest
logged start, whichever is later (:func:`~caravel.flow.window.window_clock`): a claim whose
clock was read before a later one took its turn still counts every start inside its window.
Starts logged by a claim whose clock ran ahead still count (the window has no upper end), so a
skewed clock can only make the queue slower, never faster.

A fair queue's claims (``fair`` on its row) run the same way, with
:func:`~caravel.store.claims.claim_fair` as the statement: its weights are read by the claim
itself, so a change to them is kept by the next claim. A fair queue with a rate is claimed as a
queue with a rate, its due jobs put in fair order (:func:`caravel.flow.fairness.fair_order`)
before :func:`~caravel.flow.window.fit` chooses among them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import sqlalchemy as sa

from caravel.errors import ValidationError
from caravel.flow.concurrency import ConcurrencyLimit, check_limit
from caravel.flow.fairness import fair_order, next_cursor
from caravel.flow.rate import RateLimit, check_rate
from caravel.flow.window import Candidate, Caps, fit, stale_before, window_clock
from caravel.jobs import JobState
from caravel.store import claims
from caravel.store.plans import Plan, Step
from caravel.store.protocol import (
    ClaimRequest,
    ClaimSource,
    KeyUsage,
    LimitKind,
    QueueLimit,
    QueueLimitUsage,
)
from caravel.store.schema import jobs, partition, queue_limits, queue_starts, queue_weights
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
    "rate_used",
    "read_limit",
    "read_weights",
    "set_limit",
    "set_weights",
    "stored_fields",
    "usage_by_key",
    "waiting",
]

#: The most partition keys :meth:`Store.queue_limit_usage` returns per queue.
MAX_USAGE_KEYS = 1000

RUNNING = JobState.RUNNING.value
READY = JobState.READY.value
WAITING = (JobState.READY.value, JobState.RUNNING.value)

_CONCURRENCY = ("concurrency", "per_key")
_RATE = ("rate", "rate_per_key", "rate_period_ms")


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
    """Log one start (``b_queue``, ``b_key``, ``b_now``, ``b_weight``); run once per start."""
    return sa.insert(queue_starts).values(
        queue=sa.bindparam("b_queue"),
        key=sa.bindparam("b_key"),
        started_at=sa.bindparam("b_now", type_=sa.BigInteger()),
        weight=sa.bindparam("b_weight", type_=sa.Integer()),
    )


def list_limits() -> sa.Select[Any]:
    """Every queue's limits, by name."""
    return sa.select(queue_limits).order_by(queue_limits.c.queue)


def read_limit() -> sa.Select[Any]:
    """``b_queue``'s limits, if it has any."""
    return sa.select(
        queue_limits.c.concurrency,
        queue_limits.c.per_key,
        queue_limits.c.rate,
        queue_limits.c.rate_per_key,
        queue_limits.c.rate_period_ms,
        queue_limits.c.fair,
        queue_limits.c.fair_cursor,
    ).where(queue_limits.c.queue == sa.bindparam("b_queue", type_=queue_limits.c.queue.type))


def move_cursor() -> sa.Update:
    """Set ``b_queue``'s fair cursor to ``b_cursor``."""
    return (
        sa.update(queue_limits)
        .where(queue_limits.c.queue == sa.bindparam("b_queue"))
        .values(fair_cursor=sa.bindparam("b_cursor"))
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
    ) -> sa.Update:
        raise NotImplementedError

    def _claim_target(self, candidates: sa.Select[Any]) -> sa.ColumnElement[bool]:
        raise NotImplementedError

    #: How a fair claim reads each key's first jobs (:data:`~caravel.store.claims.KeyJobs`).
    _fair_key_jobs: claims.KeyJobs = staticmethod(claims.in_key_jobs)

    async def queue_limit_set(self, limit: ConcurrencyLimit | RateLimit, now: int) -> QueueLimit:
        limit = checked_limit(limit)
        fields = stored_fields(limit)
        kind = "rate" if isinstance(limit, RateLimit) else "concurrency"
        stmt = self._statement(
            f"queue_limit_set_{kind}", lambda: set_limit(self._queue_limits_insert(), list(fields))
        )
        params: dict[str, Any] = {f"b_{name}": value for name, value in fields.items()}
        params.update(b_queue=limit.queue, b_now=now)
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
        """The limited claim (see the module docstring) as a plan, for the dialect to run in
        one write transaction; ``params`` are the plain claim's. Its value: the claimed rows."""
        source = request.source
        lock = self._statement("limit_lock", lambda: self._limit_lock(read_limit()))
        found = yield Step(lock, {"b_queue": request.queue})
        if found and found[0].rate_period_ms is not None:
            return (yield from self._claim_rated(request, params, found[0]))
        concurrency, per_key = (None, None) if not found else found[0][:2]
        fair = bool(found and found[0].fair)
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
            params["b_cursor"] = found[0].fair_cursor or ""
            keyed = per_key is not None
            stmt = self._statement(
                f"claim_fair_{source}_{keyed}",
                lambda: claims.claim_fair(
                    source, self._claim_target, self._fair_key_jobs, per_key=keyed
                ),
            )
        elif per_key is None:
            stmt = self._statement(
                f"claim_limited_{source}",
                lambda: self._claim_statement(source, unlimited=False),
            )
        else:
            stmt = self._statement(
                f"claim_per_key_{source}", lambda: claims.claim_per_key(source, self._claim_target)
            )
        claimed = yield Step(stmt, params)
        if fair:
            yield from self._move_cursor(request.queue, found[0].fair_cursor, claimed)
        return claimed

    def _move_cursor(self, queue: str, cursor: str | None, claimed: Sequence[Any]) -> Plan[None]:
        """Store the fair cursor a claim leaves (:func:`~caravel.flow.fairness.next_cursor`)
        when it moved."""
        served = (row.partition_key or row.tenant_id for row in claimed if row.state == RUNNING)
        moved = next_cursor(cursor, served)
        if moved != cursor:
            yield Step(
                self._statement("fair_cursor", move_cursor), {"b_queue": queue, "b_cursor": moved}
            )

    def _claim_rated(
        self, request: ClaimRequest, params: dict[str, Any], stored: Any
    ) -> Plan[list[Any]]:
        """The limited claim of a queue with a rate (see the module docstring)."""
        queue, period = params["b_queue"], int(stored.rate_period_ms)
        latest = yield Step(self._statement("latest_start", latest_start), {"b_queue": queue})
        latest_at = None if latest[0][0] is None else int(latest[0][0])
        now = window_clock(params["b_now"], latest_at)
        # The lease runs from the time the claim is logged at, as ever.
        params = {**params, "b_now": now, "b_expires": params["b_expires"] + now - params["b_now"]}
        since = now - period
        stale = stale_before(latest_at, period)
        if stale is not None:
            prune = self._statement("starts_prune", prune_starts)
            yield Step(prune, {"b_queue": queue, "b_since": stale})
        started = yield Step(
            self._statement("starts_in_window", started_by_key),
            {"b_queue": queue, "b_since": since},
        )
        running = yield Step(
            self._statement("running_by_key", claims.running_by_key),
            {"b_queue": queue, "b_now": now},
        )
        source = request.source
        due = yield Step(
            self._statement(f"due_weighed_{source}", lambda: claims.due_weighed(source)),
            {"b_queue": queue, "b_now": now},
        )
        if stored.fair:
            weighing = self._statement("queue_weights_read", read_weights)
            weights = yield Step(weighing, {"b_queue": queue})
            sources = ("expired", "ready") if source == "any" else (source,)
            due = [
                due[at]
                for at in fair_order(
                    [(sources[int(row.part)] == "expired", row.key) for row in due],
                    {row.key: int(row.weight) for row in weights},
                    {row.key: int(row.running) for row in running},
                    stored.fair_cursor,
                )
            ]
        caps = Caps(stored.concurrency, stored.per_key, stored.rate, stored.rate_per_key)
        chosen = fit(
            (Candidate(row.id, row.key, int(row.weight)) for row in due),
            request.limit,
            caps,
            {row.key: int(row.running) for row in running},
            {row.key: int(row.weight) for row in started},
        )
        if not chosen:
            return []
        claimed = yield Step(
            self._statement("claim_ids", claims.claim_ids),
            {**params, "b_ids": [job.id for job in chosen]},
        )
        by_id = {job.id: job for job in chosen}
        starts = [
            {
                "b_queue": queue,
                "b_key": by_id[row.id].key,
                "b_now": now,
                "b_weight": by_id[row.id].weight,
            }
            for row in claimed
            if row.state == RUNNING
        ]
        if starts:
            yield Step(self._statement("starts_log", log_starts), starts)
        if stored.fair:
            yield from self._move_cursor(queue, stored.fair_cursor, claimed)
        return claimed


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
