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
from caravel.codec import encode_dumped, encode_dumped_together, encode_payload
from caravel.errors import ValidationError
from caravel.flow.partition import TENANT, partition_key_of
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
    job_id = uuid7(now) if job_id is None else job_id
    (new_job,) = _new_jobs(entry, options, [(job, dispatch)], [payload], [job_id], now)
    return new_job


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
        payloads = encode_dumped_together(entry.adapter, dumps, limit)
        if payloads is None:  # some job needs a look of its own
            payloads = [
                encode_dumped(entry.adapter, job, dumped, limit, job_type=wire_name)
                for job, dumped in zip(jobs, dumps, strict=True)
            ]
        return _new_jobs(entry, options, items, payloads, ids, now)
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


_tuple_new = tuple.__new__


def _new_jobs(
    entry: JobRegistration,
    options: QueueOptions,
    items: Sequence[tuple[object, DispatchOptions]],
    payloads: Sequence[str],
    ids: Sequence[UUID],
    now: int,
) -> list[NewJob]:
    """The rows of ``items``, jobs of ``entry``'s type, with their serialized payloads and ids.
    What the job type settles is looked up once, and each row is built as a tuple in the
    order of :class:`NewJob`'s fields: a keyword call and a helper per field cost more than the
    rest of preparing a small job."""
    wire_name = entry.wire_name
    default_attempts = _type_attempts(entry) or options.max_attempts
    type_priority = 0 if entry.priority is None else entry.priority
    partition_by = entry.partition_by
    weight = None if entry.weight == 1 else entry.weight
    new_jobs: list[NewJob] = []
    append = new_jobs.append
    for (job, d), payload, job_id in zip(items, payloads, ids, strict=True):
        pending_key, partition_key = d.pending_key, d.partition_key
        fields = (
            job_id,
            d.queue,
            wire_name,
            d.tenant_id,
            d.idempotency_key,
            payload,
            d.max_attempts or default_attempts,
            now if d.not_before is None and d.delay is None else _due(d, now),
            now,
            None,  # trace_context: the store's telemetry wrapper adds it
            stored_tags(d.tags) if d.tags else None,
            type_priority if d.priority is None else d.priority,
            pending_key,
            None if pending_key is None else _debounce_ms(d),
            None if d.timeout is None else duration_ms(d.timeout),
            partition_key
            if partition_key is not None or partition_by == TENANT
            else partition_key_of(partition_by, job, None),
            weight,
        )
        append(_tuple_new(NewJob, fields))
    return new_jobs


def _debounce_ms(dispatch: DispatchOptions) -> int | None:
    """What a job pending under the dispatch's key may be pushed back by, in whole ms (at least
    1), when the dispatch replaces it; ``None`` when it keeps it or has no key."""
    if dispatch.pending_key is None or dispatch.on_pending != "replace":
        return None
    return max(1, dispatch.max_debounce // timedelta(milliseconds=1))


def _type_attempts(entry: JobRegistration) -> int | None:
    """The attempt budget the job type's retry policy sets, if any."""
    return None if entry.retry is None else entry.retry.max_attempts
