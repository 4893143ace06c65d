"""Running one handler without a queue, the way a worker would run it.

:func:`perform` prepares the job exactly as ``enqueue`` does (the same validation and canonical
JSON, so an invalid job raises the same :class:`~caravel.errors.ValidationError`), reads it back
from that JSON as the worker does, and calls the registered handler with a real
:class:`~caravel.JobContext`. A job whose type does not survive the round trip fails here, in
the test, instead of in production.
"""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID

from caravel.clock import SystemClock
from caravel.codec import PayloadDecodeError, decode_payload
from caravel.context import CancellationSignal, JobContext
from caravel.errors import ValidationError
from caravel.jobs import DEFAULT_TENANT, DispatchOptions
from caravel.options import QueueOptions
from caravel.preparation import prepare_job
from caravel.registry import JobRegistry

__all__ = ["perform", "perform_sync"]


async def perform(
    registry: JobRegistry,
    job: object,
    *,
    queue: str = "default",
    tenant_id: str = DEFAULT_TENANT,
    attempt: int = 1,
    max_attempts: int | None = None,
    scope: Any = None,
    job_id: UUID | None = None,
    cancelled: CancellationSignal | None = None,
    options: QueueOptions | None = None,
) -> Any:
    """Run ``job``'s registered handler once and return what it returns; a failing handler
    raises its exception here.

    The handler gets the job as decoded from its stored JSON and a context naming ``queue``,
    ``tenant_id``, ``attempt`` of ``max_attempts`` (the queue default of ``options`` when
    ``None``), ``job_id`` (a new id when ``None``), ``scope`` and ``cancelled`` (a fresh,
    unset signal when ``None``; set one beforehand to test a handler's cancellation path).
    Synchronous handlers run in a thread, as on a worker.
    """
    if not isinstance(registry, JobRegistry):
        raise ValidationError("registry", "must be a JobRegistry")
    options = options if options is not None else QueueOptions()
    dispatch = DispatchOptions(queue=queue, tenant_id=tenant_id, max_attempts=max_attempts)
    new_job = prepare_job(registry, options, job, dispatch, SystemClock().now_ms(), job_id)
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
        raise ValidationError("attempt", "must be a positive integer")
    if attempt > new_job.max_attempts:
        raise ValidationError("attempt", "must not be greater than max_attempts")
    entry = registry.for_job(job)
    try:
        decoded = decode_payload(entry.adapter, new_job.payload)
    except PayloadDecodeError:
        raise ValidationError(
            "job",
            f"does not read back from its stored JSON as {entry.payload_type.__qualname__}; "
            "a worker would record InvalidPayload",
        ) from None
    context: JobContext[Any] = JobContext(
        job_id=new_job.id,
        queue=new_job.queue,
        tenant_id=new_job.tenant_id,
        job_type=new_job.job_type,
        attempt=attempt,
        max_attempts=new_job.max_attempts,
        scope=scope,
        cancelled=cancelled if cancelled is not None else CancellationSignal(),
    )
    if entry.is_async:
        return await entry.handler(decoded, context)  # type: ignore[misc]
    # A thread, as on a worker; asyncio.to_thread carries the context variables along.
    return await asyncio.to_thread(entry.handler, decoded, context)


def perform_sync(registry: JobRegistry, job: object, **kwargs: Any) -> Any:
    """:func:`perform` for synchronous tests (no event loop running in this thread): the same
    arguments, run to completion on a loop of its own."""
    return asyncio.run(perform(registry, job, **kwargs))
