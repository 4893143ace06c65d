"""The outbox table, added to the application's own SQLAlchemy metadata so the application's
Alembic migrations create it. Nothing here creates tables at run time. The columns are defined
in the store (:mod:`caravel.store.outbox`), beside the relay's statements that read them."""

from __future__ import annotations

import weakref
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy import orm

from caravel.outbox import OUTBOX_TABLE
from caravel.store.outbox import outbox_table

__all__ = ["OUTBOX_TABLE", "OutboxEnvelope", "add_outbox"]

#: The envelope class mapped to each outbox table. Kept here, not in the table's ``info``: an
#: application's Alembic autogenerate writes ``info`` into the migration it generates, and a
#: class there is not Python it can run.
_ENVELOPES: weakref.WeakKeyDictionary[sa.Table, type[OutboxEnvelope]] = weakref.WeakKeyDictionary()


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


def add_outbox(metadata: sa.MetaData, *, name: str = OUTBOX_TABLE) -> type[OutboxEnvelope]:
    """Add the outbox table to ``metadata`` (your application's, e.g. ``Base.metadata``) and
    return the mapped envelope class to give :class:`~caravel.outbox.Outbox`.

    Calling it again for the same metadata returns the same class. Generate and review an Alembic
    migration for your application afterwards (``alembic revision --autogenerate``).
    """
    existing = metadata.tables.get(name)
    found = None if existing is None else _ENVELOPES.get(existing)
    if found is not None:
        return found
    table = outbox_table(metadata, name)
    envelope = type("OutboxEnvelope", (OutboxEnvelope,), {"__module__": __name__})
    orm.registry().map_imperatively(envelope, table)
    _ENVELOPES[table] = envelope
    return envelope
