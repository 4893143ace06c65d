"""The outbox table, added to the application's own SQLAlchemy metadata so the application's
Alembic migrations create it. Nothing here creates tables at run time."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy import orm

from caravel.limits import (
    MAX_CATEGORY_LENGTH,
    MAX_KEY_LENGTH,
    MAX_QUEUE_NAME_LENGTH,
    MAX_TRACE_CONTEXT_LENGTH,
    MAX_WIRE_NAME_LENGTH,
)
from caravel.outbox import OUTBOX_TABLE

__all__ = ["OUTBOX_TABLE", "OutboxEnvelope", "add_outbox"]

_ENVELOPE_CLASS = "caravel_envelope_class"


class OutboxEnvelope:
    """One staged job intent: a row of the outbox table.

    Times are milliseconds since the epoch (UTC). ``due_at`` and ``max_attempts`` are ``None``
    when the dispatch left them to the queue. ``dispatched_at`` and ``queue_job_id`` are set by
    the relay once the queue has the job. ``relay_failure`` names why the relay could not deliver
    it yet (``UnknownJobType``, ``InvalidPayload``, ``IdempotencyConflict``); such envelopes stay
    pending for deliberate repair.
    """

    id: UUID
    queue: str
    tenant_id: str
    idempotency_key: str | None
    job_type: str
    payload: str
    due_at: int | None
    max_attempts: int | None
    staged_at: int
    dispatched_at: int | None
    queue_job_id: UUID | None
    relay_failure: str | None
    relay_attempts: int
    retry_at: int | None
    trace_context: str | None

    def __init__(self, **values: Any) -> None:
        values.setdefault("relay_attempts", 0)
        for name, value in values.items():
            setattr(self, name, value)


def _columns(name: str) -> list[Any]:
    return [
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
    ]


def add_outbox(metadata: sa.MetaData, *, name: str = OUTBOX_TABLE) -> type[OutboxEnvelope]:
    """Add the outbox table to ``metadata`` (your application's, e.g. ``Base.metadata``) and
    return the mapped envelope class to give :class:`~caravel.outbox.Outbox`.

    Calling it again for the same metadata returns the same class. Generate and review an Alembic
    migration for your application afterwards (``alembic revision --autogenerate``).
    """
    existing = metadata.tables.get(name)
    if existing is not None and _ENVELOPE_CLASS in existing.info:
        found: type[OutboxEnvelope] = existing.info[_ENVELOPE_CLASS]
        return found
    table = sa.Table(name, metadata, *_columns(name))
    envelope = type("OutboxEnvelope", (OutboxEnvelope,), {"__module__": __name__})
    orm.registry().map_imperatively(envelope, table)
    table.info[_ENVELOPE_CLASS] = envelope
    return envelope


def envelope_table(envelope: type[OutboxEnvelope]) -> sa.Table:
    """The table an envelope class is mapped to."""
    table = sa.inspect(envelope).local_table
    assert isinstance(table, sa.Table)
    return table
