"""Staging job intents in the application's own session.

``stage`` validates a job exactly as enqueue does and adds an envelope to the session. It neither
commits nor touches the queue database: one commit of the application's transaction saves its
business rows and the envelope together, and a rollback drops both.
"""

from __future__ import annotations

from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, overload
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from caravel import telemetry
from caravel.clock import Clock, SystemClock
from caravel.errors import IdempotencyConflictError, ValidationError
from caravel.jobs import DispatchOptions
from caravel.options import QueueOptions
from caravel.outbox.conversion import envelope_for
from caravel.outbox.table import OutboxEnvelope
from caravel.preparation import prepare_job
from caravel.registry import JobRegistry

__all__ = ["Outbox", "StagedIntent"]


@dataclass(frozen=True, slots=True)
class StagedIntent:
    """A staging receipt. ``outbox_id`` identifies the envelope; it is not a promise that the
    queue job exists yet. ``already_staged`` is true when the same queue, tenant, key and payload
    had been staged before (even if it was dispatched since)."""

    outbox_id: UUID
    already_staged: bool


class Outbox:
    """Stages jobs into an application's session.

    ``envelope`` is the class :func:`~caravel.outbox.add_outbox` returned for your metadata.
    Use the same registry and options as your queue, so staged jobs are checked as enqueued ones
    are.
    """

    def __init__(
        self,
        registry: JobRegistry,
        envelope: type[OutboxEnvelope],
        *,
        options: QueueOptions | None = None,
        clock: Clock | None = None,
    ) -> None:
        if not (isinstance(envelope, type) and issubclass(envelope, OutboxEnvelope)):
            raise ValidationError("envelope", "must be the class add_outbox returned")
        self.registry = registry
        self.envelope = envelope
        self.options = options if options is not None else QueueOptions()
        self.clock: Clock = clock if clock is not None else SystemClock()

    @overload
    def stage(
        self, session: AsyncSession, job: object, dispatch: DispatchOptions
    ) -> Coroutine[Any, Any, StagedIntent]: ...
    @overload
    def stage(self, session: Session, job: object, dispatch: DispatchOptions) -> StagedIntent: ...
    def stage(
        self, session: AsyncSession | Session, job: object, dispatch: DispatchOptions
    ) -> StagedIntent | Coroutine[Any, Any, StagedIntent]:
        """Validate ``job`` and add its envelope to ``session`` without committing.

        With an :class:`~sqlalchemy.ext.asyncio.AsyncSession`, await the result; with a plain
        :class:`~sqlalchemy.orm.Session` it returns at once. The same queue, tenant, key, job type
        and payload returns the existing intent; different content raises
        :class:`~caravel.errors.IdempotencyConflictError`. A unique index settles two
        transactions staging one key at once: the loser's commit fails, and retrying the whole
        unit of work in a fresh session returns the winner's intent.
        """
        envelope = self._envelope(job, dispatch)
        if isinstance(session, AsyncSession):
            return self._stage_async(session, envelope)
        if isinstance(session, Session):
            return self._stage_sync(session, envelope)
        raise ValidationError("session", "must be a SQLAlchemy Session or AsyncSession")

    def _envelope(self, job: object, dispatch: DispatchOptions) -> OutboxEnvelope:
        now = self.clock.now_ms()
        prepared = prepare_job(self.registry, self.options, job, dispatch, now)
        # The request's trace continues into the job the relay creates from this intent.
        trace = telemetry.carrier_for_current_context()
        return envelope_for(self.envelope, prepared, dispatch, staged_at=now, trace_context=trace)

    def _lookup(self, envelope: OutboxEnvelope) -> sa.Select[Any] | None:
        """The query for an intent already staged under the envelope's key (none without a
        key)."""
        if envelope.idempotency_key is None:
            return None
        columns = sa.inspect(self.envelope).c
        return sa.select(self.envelope).where(
            columns.queue == envelope.queue,
            columns.tenant_id == envelope.tenant_id,
            columns.idempotency_key == envelope.idempotency_key,
        )

    @staticmethod
    def _resolve_or_add(
        session: Session | AsyncSession, envelope: OutboxEnvelope, existing: OutboxEnvelope | None
    ) -> StagedIntent:
        """Staging once the lookup has run: the existing intent when its content matches, else
        the envelope, added to the session."""
        if existing is not None:
            if (existing.job_type, existing.payload) != (envelope.job_type, envelope.payload):
                raise IdempotencyConflictError(existing.id)
            return StagedIntent(existing.id, already_staged=True)
        session.add(envelope)
        telemetry.record_staged(envelope.queue, envelope.job_type)
        return StagedIntent(envelope.id, already_staged=False)

    # The two shells differ only in how they run the lookup.

    def _stage_sync(self, session: Session, envelope: OutboxEnvelope) -> StagedIntent:
        lookup = self._lookup(envelope)
        existing: OutboxEnvelope | None = None
        if lookup is not None:
            existing = session.scalars(lookup).first()
        return self._resolve_or_add(session, envelope, existing)

    async def _stage_async(self, session: AsyncSession, envelope: OutboxEnvelope) -> StagedIntent:
        lookup = self._lookup(envelope)
        existing: OutboxEnvelope | None = None
        if lookup is not None:
            existing = (await session.scalars(lookup)).first()
        return self._resolve_or_add(session, envelope, existing)
