"""Preparing new jobs: an application's job value and dispatch options become a validated,
serialized row ready to insert.

Enqueue and outbox staging both go through :func:`prepare_job`, so a job is checked the same way
whichever path it takes.
"""

from __future__ import annotations

from caravel._ids import uuid7
from caravel.clock import to_ms_ceil
from caravel.codec import encode_payload
from caravel.errors import ValidationError
from caravel.jobs import DispatchOptions
from caravel.options import QueueOptions
from caravel.registry import JobRegistry
from caravel.store.protocol import NewJob

__all__ = ["prepare_job"]


def prepare_job(
    registry: JobRegistry,
    options: QueueOptions,
    job: object,
    dispatch: DispatchOptions,
    now: int,
) -> NewJob:
    """Validate ``job`` against its registration and the payload limits and serialize it
    canonically. Raises :class:`~caravel.errors.UnknownJobTypeError` or
    :class:`~caravel.errors.ValidationError`; writes nothing."""
    if not isinstance(dispatch, DispatchOptions):
        raise ValidationError("dispatch", "must be a DispatchOptions")
    entry = registry.for_job(job)
    payload = encode_payload(
        entry.adapter, job, options.max_payload_bytes, job_type=entry.wire_name
    )
    due = now if dispatch.not_before is None else to_ms_ceil(dispatch.not_before)
    return NewJob(
        id=uuid7(now),
        queue=dispatch.queue,
        job_type=entry.wire_name,
        tenant_id=dispatch.tenant_id,
        idempotency_key=dispatch.idempotency_key,
        payload=payload,
        max_attempts=dispatch.max_attempts or options.max_attempts,
        due_at=due,
        created_at=now,
    )
