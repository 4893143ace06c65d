"""Between an envelope and the job it stands for, both ways, so the field mapping is written once.

Staging turns a prepared job into an envelope; the relay turns a stored envelope back into a job.
The shared fields copy across unchanged. ``due_at`` and ``max_attempts`` are kept only where the
dispatch set them: ``None`` leaves them to the queue, which fills them in when the relay creates
the job (due then, the queue's default budget). The job is created at relay time, and the trace
context travels with the intent, so the request that staged it continues into the job.

Tags, priorities and pending keys do not cross: the outbox table is the application's, created
by its own migrations, and has no column for them. Staging a dispatch with tags, a priority other
than 0 (a priority given by the job type's registration too) or a pending key is refused rather
than relaying a job without them that the caller believes has them (a relayed job without its
pending key would not dedupe or debounce).
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
    ``partition_key``) when the dispatch has tags or a pending key, or the job a priority other
    than 0 (its dispatch's or its type's) or a partition key (its dispatch's or its payload's)."""
    if dispatch.tags:
        rule = "cannot be staged in the outbox (its table has no tags column); enqueue directly"
        raise ValidationError("tags", rule)
    if job.priority != 0:
        rule = "cannot be staged in the outbox (its table has no priority column); enqueue directly"
        raise ValidationError("priority", rule)
    if dispatch.pending_key is not None:
        rule = (
            "cannot be staged in the outbox (its table has no pending_key column); enqueue directly"
        )
        raise ValidationError("pending_key", rule)
    if job.partition_key is not None:
        rule = (
            "cannot be staged in the outbox (its table has no partition_key column); enqueue"
            " directly"
        )
        raise ValidationError("partition_key", rule)
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
