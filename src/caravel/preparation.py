"""Preparing new jobs: an application's job value and dispatch options become a validated,
serialized row ready to insert.

Enqueue and outbox staging both go through :func:`prepare_job`, so a job is checked the same way
whichever path it takes; a bulk enqueue's :func:`prepare_jobs` checks each job the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any
from uuid import UUID

from pydantic import TypeAdapter

from caravel._ids import uuid7, uuid7_many
from caravel.clock import duration_ms, to_ms_ceil
from caravel.codec import encode_dumped, encode_payload
from caravel.errors import ValidationError
from caravel.flow.partition import partition_key_of
from caravel.jobs import DispatchOptions
from caravel.options import QueueOptions
from caravel.registry import JobRegistration, JobRegistry
from caravel.store.protocol import NewJob
from caravel.tags import stored_tags

__all__ = ["dispatch_of", "prepare_job", "prepare_jobs"]


def dispatch_of(item: object, field: str) -> DispatchOptions:
    """The options of a ``(job, DispatchOptions)`` pair given as ``field``."""
    if isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], DispatchOptions):
        return item[1]
    raise ValidationError(field, "must be a (job, DispatchOptions) pair")


def prepare_job(
    registry: JobRegistry,
    options: QueueOptions,
    job: object,
    dispatch: DispatchOptions,
    now: int,
    job_id: UUID | None = None,
) -> NewJob:
    """Validate ``job`` against its registration and the payload limits and serialize it
    canonically, under ``job_id`` or a new id. Raises :class:`~caravel.errors.UnknownJobTypeError`
    or :class:`~caravel.errors.ValidationError`; writes nothing."""
    if not isinstance(dispatch, DispatchOptions):
        raise ValidationError("dispatch", "must be a DispatchOptions")
    entry = registry.for_job(job)
    payload = encode_payload(
        entry.adapter, job, options.max_payload_bytes, job_type=entry.wire_name
    )
    return _new_job(
        entry, options, dispatch, payload, uuid7(now) if job_id is None else job_id, now, job
    )


def prepare_jobs(
    registry: JobRegistry,
    options: QueueOptions,
    items: Sequence[tuple[object, DispatchOptions]],
    now: int,
) -> list[NewJob]:
    """:func:`prepare_job` for each of ``items``, in order, raising the first bad job's error.

    When every job has the same type, their payloads are dumped by pydantic in one call (a call
    per job cost more than the dump itself); otherwise, or when any job fails, job by job."""
    ids = uuid7_many(now, len(items))
    prepared = _prepared_together(registry, options, items, ids, now)
    if prepared is not None:
        return prepared
    return [
        prepare_job(registry, options, job, dispatch, now, job_id)
        for (job, dispatch), job_id in zip(items, ids, strict=True)
    ]


def _prepared_together(
    registry: JobRegistry,
    options: QueueOptions,
    items: Sequence[tuple[object, DispatchOptions]],
    ids: list[UUID],
    now: int,
) -> list[NewJob] | None:
    """The jobs of ``items`` prepared with one dump of all their payloads, or ``None`` when they
    are not all of one registered type with their dispatch options, or when any fails (the job
    by job path then finds the first bad job and raises its own error)."""
    try:
        jobs = [job for job, _ in items]
        entry = registry.for_job(jobs[0])
        kind = entry.payload_type  # the job's exact type
        if any(type(job) is not kind or not isinstance(d, DispatchOptions) for job, d in items):
            return None
        dumps = _list_adapter(kind).dump_python(jobs, mode="python")
        limit, wire_name = options.max_payload_bytes, entry.wire_name
        return [
            _new_job(
                entry,
                options,
                dispatch,
                encode_dumped(entry.adapter, job, dumped, limit, job_type=wire_name),
                job_id,
                now,
                job,
            )
            for (job, dispatch), dumped, job_id in zip(items, dumps, ids, strict=True)
        ]
    except Exception:  # whatever it is, the job by job path raises it for the right job
        return None


def _list_adapter(kind: type[Any]) -> TypeAdapter[list[Any]]:
    """An adapter for a list of ``kind``, whose items serialize as the type's own adapter does
    them (built on first use: most registered types are never enqueued in bulk)."""
    adapter = _LIST_ADAPTERS.get(kind)
    if adapter is None:
        adapter = _LIST_ADAPTERS.setdefault(kind, TypeAdapter(list[kind]))  # type: ignore[valid-type]
    return adapter


#: By payload type (a registered type, which its registry keeps alive anyway).
_LIST_ADAPTERS: dict[type[Any], TypeAdapter[list[Any]]] = {}


def _due(dispatch: DispatchOptions, now: int) -> int:
    """When the job may first run: ``not_before``, or ``delay`` after ``now``, both rounded up
    to the millisecond; else ``now``."""
    if dispatch.not_before is not None:
        return to_ms_ceil(dispatch.not_before)
    if dispatch.delay is not None:
        return now + duration_ms(dispatch.delay)
    return now


def _new_job(
    entry: JobRegistration,
    options: QueueOptions,
    dispatch: DispatchOptions,
    payload: str,
    job_id: UUID,
    now: int,
    job: object,
) -> NewJob:
    due = _due(dispatch, now)
    tags = dispatch.tags
    return NewJob(
        id=job_id,
        queue=dispatch.queue,
        job_type=entry.wire_name,
        tenant_id=dispatch.tenant_id,
        idempotency_key=dispatch.idempotency_key,
        payload=payload,
        max_attempts=dispatch.max_attempts or _type_attempts(entry) or options.max_attempts,
        due_at=due,
        created_at=now,
        tags=stored_tags(tags) if tags else None,
        priority=_priority(entry, dispatch),
        pending_key=dispatch.pending_key,
        debounce_ms=_debounce_ms(dispatch),
        timeout_ms=None if dispatch.timeout is None else duration_ms(dispatch.timeout),
        partition_key=partition_key_of(entry.partition_by, job, dispatch.partition_key),
        weight=None if entry.weight == 1 else entry.weight,
    )


def _priority(entry: JobRegistration, dispatch: DispatchOptions) -> int:
    """The dispatch's priority, else the job type's, else 0."""
    if dispatch.priority is not None:
        return dispatch.priority
    return 0 if entry.priority is None else entry.priority


def _debounce_ms(dispatch: DispatchOptions) -> int | None:
    """What a job pending under the dispatch's key may be pushed back by, in whole ms (at least
    1), when the dispatch replaces it; ``None`` when it keeps it or has no key."""
    if dispatch.pending_key is None or dispatch.on_pending != "replace":
        return None
    return max(1, dispatch.max_debounce // timedelta(milliseconds=1))


def _type_attempts(entry: JobRegistration) -> int | None:
    """The attempt budget the job type's retry policy sets, if any."""
    return None if entry.retry is None else entry.retry.max_attempts
