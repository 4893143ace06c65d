"""The outbox store: the outbox table's definition and the operations the relay runs on it, in
the application's database.

The table belongs to the application: :func:`~caravel.outbox.add_outbox` adds it to the
application's metadata and the application's migrations create it. This store only reads and
updates the rows the application's transactions committed. Its statements are portable
SQLAlchemy Core, the same on PostgreSQL and SQLite; a dialect matters only when an engine is
created for a URL (:func:`~caravel.store.open_outbox_store`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, fields
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from caravel.limits import (
    MAX_CATEGORY_LENGTH,
    MAX_KEY_LENGTH,
    MAX_QUEUE_NAME_LENGTH,
    MAX_TRACE_CONTEXT_LENGTH,
    MAX_WIRE_NAME_LENGTH,
)
from caravel.store.errors import ErrorTranslation

__all__ = ["OutboxStore", "PendingEnvelope", "Undeliverable", "outbox_table"]


def outbox_table(metadata: sa.MetaData, name: str) -> sa.Table:
    """Define the outbox table ``name`` in ``metadata``; its constraint and index names derive
    from ``name``, so one database can hold several outboxes."""
    return sa.Table(
        name,
        metadata,
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("queue", sa.String(MAX_QUEUE_NAME_LENGTH), nullable=False),
        sa.Column("tenant_id", sa.String(MAX_KEY_LENGTH), nullable=False),
        sa.Column("idempotency_key", sa.String(MAX_KEY_LENGTH), nullable=True),
        sa.Column("job_type", sa.String(MAX_WIRE_NAME_LENGTH), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("due_at", sa.BigInteger(), nullable=True),
        sa.Column("max_attempts", sa.Integer(), nullable=True),
        sa.Column("staged_at", sa.BigInteger(), nullable=False),
        sa.Column("dispatched_at", sa.BigInteger(), nullable=True),
        sa.Column("queue_job_id", sa.Uuid(), nullable=True),
        sa.Column("relay_failure", sa.String(MAX_CATEGORY_LENGTH), nullable=True),
        sa.Column("relay_attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("retry_at", sa.BigInteger(), nullable=True),
        sa.Column("trace_context", sa.String(MAX_TRACE_CONTEXT_LENGTH), nullable=True),
        sa.PrimaryKeyConstraint("id", name=f"pk_{name}"),
        sa.UniqueConstraint("queue", "tenant_id", "idempotency_key", name=f"uq_{name}_idempotency"),
        sa.Index(
            f"ix_{name}_pending",
            "staged_at",
            postgresql_where=sa.text("dispatched_at IS NULL"),
            sqlite_where=sa.text("dispatched_at IS NULL"),
        ),
    )


@dataclass(frozen=True, slots=True)
class PendingEnvelope:
    """An envelope not dispatched yet, as the relay reads it. ``due_at`` and ``max_attempts``
    are ``None`` when the dispatch left them to the queue; ``relay_attempts`` counts the passes
    that could not deliver it."""

    id: UUID
    queue: str
    tenant_id: str
    idempotency_key: str | None
    job_type: str
    payload: str
    due_at: int | None
    max_attempts: int | None
    relay_attempts: int
    trace_context: str | None


@dataclass(frozen=True, slots=True)
class Undeliverable:
    """An envelope a relay pass could not deliver: why (``UnknownJobType``, ``InvalidPayload``,
    ``IdempotencyConflict``), and when to try it again."""

    envelope_id: UUID
    reason: str
    retry_at: int


_PENDING_COLUMNS = tuple(field.name for field in fields(PendingEnvelope))


class OutboxStore:
    """The relay's operations on one outbox table, over the application's async engine.

    Database errors become :class:`~caravel.errors.StoreError` naming ``outbox_read`` (listing
    and counting) or ``outbox_mark`` (recording a pass's outcome); a missing table is one of
    them, since the application's migrations, not the queue's, create it. :meth:`close`
    disposes the engine only when ``owns_engine`` (the store created it)."""

    def __init__(self, engine: AsyncEngine, table_name: str, *, owns_engine: bool) -> None:
        self.engine = engine
        self.table = outbox_table(sa.MetaData(), table_name)
        self._owns_engine = owns_engine
        t = self.table
        pending = t.c.dispatched_at.is_(None)
        self._list = (
            sa.select(*(t.c[name] for name in _PENDING_COLUMNS))
            .where(pending, sa.or_(t.c.retry_at.is_(None), t.c.retry_at <= sa.bindparam("now")))
            .order_by(t.c.staged_at, t.c.id)
            .limit(sa.bindparam("limit", type_=sa.Integer()))
        )
        self._count = sa.select(sa.func.count()).select_from(t).where(pending)
        self._dispatched = (
            sa.update(t)
            .where(t.c.id == sa.bindparam("b_id"), pending)
            .values(
                dispatched_at=sa.bindparam("b_now"),
                queue_job_id=sa.bindparam("b_job"),
                relay_failure=None,
                retry_at=None,
            )
        )
        # An intent a broker took is carried by no queue job: the pass's such rows share every
        # value, so one statement settles them all.
        self._published = (
            sa.update(t)
            .where(t.c.id.in_(sa.bindparam("b_ids", expanding=True)), pending)
            .values(
                dispatched_at=sa.bindparam("b_now"),
                queue_job_id=None,
                relay_failure=None,
                retry_at=None,
            )
        )
        self._undeliverable = (
            sa.update(t)
            .where(t.c.id == sa.bindparam("b_id"), pending)
            .values(
                relay_failure=sa.bindparam("b_reason"),
                relay_attempts=t.c.relay_attempts + 1,
                retry_at=sa.bindparam("b_retry_at"),
            )
        )

    @property
    def table_name(self) -> str:
        return self.table.name

    @asynccontextmanager
    async def _transaction(self, operation: str) -> AsyncIterator[AsyncConnection]:
        # Outside the transaction, so a failing commit is translated too.
        async with ErrorTranslation(operation), self.engine.begin() as conn:
            yield conn

    async def outbox_list_pending(self, now: int, limit: int) -> list[PendingEnvelope]:
        """Up to ``limit`` envelopes not yet dispatched and due for a try at ``now`` (never
        tried, or their retry time reached), oldest staged first, then by id."""
        async with self._transaction("outbox_read") as conn:
            return await self._pending(conn, now, limit)

    async def outbox_count_pending(self) -> int:
        """How many envelopes are not dispatched yet, due or not."""
        async with self._transaction("outbox_read") as conn:
            return await self._backlog(conn)

    async def outbox_read_pass(self, now: int, limit: int) -> tuple[list[PendingEnvelope], int]:
        """What one relay pass reads, in one transaction: the envelopes
        :meth:`outbox_list_pending` lists, and the count :meth:`outbox_count_pending` gives."""
        async with self._transaction("outbox_read") as conn:
            return await self._pending(conn, now, limit), await self._backlog(conn)

    async def outbox_mark_dispatched(self, job_ids: Mapping[UUID, UUID | None], now: int) -> None:
        """Record, for each envelope id, the queue job that now carries it (``None``: a message
        broker took it), dispatched at ``now``; an envelope already marked dispatched is left as
        it is."""
        await self.outbox_record_pass(job_ids, [], now)

    async def outbox_mark_undeliverable(self, envelopes: Sequence[Undeliverable]) -> None:
        """Record why each envelope could not be delivered, count the attempt, and hold it back
        until its retry time; an envelope dispatched meanwhile is left as it is."""
        await self.outbox_record_pass({}, envelopes, 0)

    async def outbox_record_pass(
        self, job_ids: Mapping[UUID, UUID | None], undeliverable: Sequence[Undeliverable], now: int
    ) -> None:
        """What one relay pass records, in one transaction (all of it or none):
        :meth:`outbox_mark_dispatched` and :meth:`outbox_mark_undeliverable` together."""
        if not job_ids and not undeliverable:
            return
        async with self._transaction("outbox_mark") as conn:
            carried = [
                {"b_id": e, "b_job": j, "b_now": now} for e, j in job_ids.items() if j is not None
            ]
            if carried:
                await conn.execute(self._dispatched, carried)
            published = [envelope for envelope, job in job_ids.items() if job is None]
            if published:
                await conn.execute(self._published, {"b_ids": published, "b_now": now})
            if undeliverable:
                stuck: list[dict[str, Any]] = [
                    {"b_id": e.envelope_id, "b_reason": e.reason, "b_retry_at": e.retry_at}
                    for e in undeliverable
                ]
                await conn.execute(self._undeliverable, stuck)

    async def _pending(self, conn: AsyncConnection, now: int, limit: int) -> list[PendingEnvelope]:
        rows = (await conn.execute(self._list, {"now": now, "limit": limit})).all()
        return [PendingEnvelope(*row) for row in rows]

    async def _backlog(self, conn: AsyncConnection) -> int:
        return int((await conn.execute(self._count)).scalar_one())

    async def close(self) -> None:
        """Dispose of the engine if this store created it."""
        if self._owns_engine:
            await self.engine.dispose()
