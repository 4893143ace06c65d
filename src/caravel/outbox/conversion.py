"""Between an envelope and the job it stands for, both ways, so the field mapping is written once.

Staging turns a prepared job into an envelope; the relay turns a stored envelope back into a job.
The shared fields copy across unchanged. ``due_at`` and ``max_attempts`` are kept only where the
dispatch set them: ``None`` leaves them to the queue, which fills them in when the relay creates
the job (due then, the queue's default budget). The job is created at relay time, and the trace
context travels with the intent, so the request that staged it continues into the job.

Tags, priorities, pending keys and per-dispatch timeouts do not cross: the outbox table is the
application's, created by its own migrations, and has no column for them. Staging a dispatch with
tags, a priority other than 0 (a priority given by the job type's registration too), a pending key
or a timeout is refused rather than relaying a job without them that the caller believes has them
(a relayed job without its pending key would not dedupe or debounce). A job type's own timeout
(``register(timeout=...)``) is not stored, so a relayed job still runs under it.
"""

from __future__ import annotations

from typing import TypeVar

from caravel.errors import ValidationError
from caravel.jobs import DispatchOptions
from caravel.outbox.table import OutboxEnvelope
from caravel.store.outbox import PendingEnvelope
from caravel.store.protocol import NewJob

__all__ = ["envelope_for", "job_for"]

E = TypeVar("E", bound=OutboxEnvelope)


def envelope_for(
    model: type[E],
    job: NewJob,
    dispatch: DispatchOptions,
    *,
    staged_at: int,
    trace_context: str | None,
) -> E:
    """The envelope (of the mapped class ``model``) staging ``job``, prepared from ``dispatch``.
    Raises :class:`~caravel.errors.ValidationError` (``tags``, ``priority``, ``pending_key``,
    ``timeout``, ``partition_key``, ``weight``) when the dispatch has tags, a pending key or a
    timeout, or the job a priority other than 0 (its dispatch's or its type's), a partition key
    (its dispatch's or its payload's) or a weight other than 1 (its type's): the outbox table has
    no column for them."""
    unstageable = {
        "tags": bool(dispatch.tags),
        "priority": job.priority != 0,
        "pending_key": dispatch.pending_key is not None,
        "timeout": dispatch.timeout is not None,
        "partition_key": job.partition_key is not None,
        "weight": job.weight is not None,
    }
    for field, present in unstageable.items():
        if present:
            no_column = f"cannot be staged in the outbox (its table has no {field} column)"
            raise ValidationError(field, f"{no_column}; enqueue directly")
    return model(
        id=job.id,
        queue=job.queue,
        tenant_id=job.tenant_id,
        idempotency_key=job.idempotency_key,
        job_type=job.job_type,
        payload=job.payload,
        # A delay counts from staging: the relay keeps the due time staging worked out.
        due_at=None if dispatch.not_before is None and dispatch.delay is None else job.due_at,
        max_attempts=None if dispatch.max_attempts is None else job.max_attempts,
        staged_at=staged_at,
        trace_context=trace_context,
    )


def job_for(envelope: PendingEnvelope, *, now: int, default_max_attempts: int) -> NewJob:
    """The job delivering ``envelope``, created at ``now``, with the queue's
    ``default_max_attempts`` where the dispatch left the budget to the queue."""
    return NewJob(
        id=envelope.id,
        queue=envelope.queue,
        tenant_id=envelope.tenant_id,
        idempotency_key=envelope.idempotency_key,
        job_type=envelope.job_type,
        payload=envelope.payload,
        due_at=now if envelope.due_at is None else envelope.due_at,
        max_attempts=envelope.max_attempts or default_max_attempts,
        created_at=now,
        trace_context=envelope.trace_context,
    )
