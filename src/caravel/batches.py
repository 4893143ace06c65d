"""Batches: a group of jobs saved together, with an optional callback job that runs once when
every one of them has finished (completed, dead-lettered or cancelled).

A batch with a callback is a workflow (:mod:`caravel.store.links.graph`): the callback is a step
after every member, counting a dead-lettered or cancelled one as finished. Every member's finish
counts one off the callback's step, in the finish's own transaction (the workflow trigger):
concurrent finishers queue on that row, so exactly one of them takes the last count, and it
releases the held callback, handing it the batch's counts. The batch's own row keeps the counts
for :class:`BatchStatus`. A member replayed after the batch finished moves the counts again but
never releases the callback a second time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from caravel._ids import uuid7
from caravel.clock import from_ms
from caravel.context import BatchOutcome
from caravel.errors import ValidationError
from caravel.jobs import DispatchOptions
from caravel.limits import MAX_BATCH_JOBS
from caravel.options import QueueOptions
from caravel.preparation import dispatch_of, prepare_job, prepare_jobs
from caravel.registry import JobRegistry
from caravel.store.links import BatchRecord, LinkedJob, NewBatch
from caravel.validation import bounded_list

__all__ = [
    "BatchOutcome",
    "BatchResult",
    "BatchStatus",
    "batch_jobs",
    "batch_status",
    "prepare_batch",
]


@dataclass(frozen=True, slots=True)
class BatchResult:
    """An enqueued batch: its id, its members' job ids in the order given, and its callback's
    job id (``None`` without one)."""

    batch_id: UUID
    job_ids: list[UUID]
    callback_id: UUID | None


@dataclass(frozen=True, slots=True)
class BatchStatus:
    """How a batch stands: ``total`` jobs, of which ``pending`` have not finished,
    ``completed``, ``failed`` (dead-lettered) and ``cancelled``. ``finished_at`` is when every
    job had finished the first time (the callback's release)."""

    batch_id: UUID
    tenant_id: str
    total: int
    pending: int
    completed: int
    failed: int
    cancelled: int
    callback_id: UUID | None
    created_at: datetime
    finished_at: datetime | None

    @property
    def finished(self) -> bool:
        return self.pending == 0


def batch_status(record: BatchRecord) -> BatchStatus:
    return BatchStatus(
        batch_id=record.id,
        tenant_id=record.tenant_id,
        total=record.total,
        pending=record.pending,
        completed=record.completed,
        failed=record.dead_letter,
        cancelled=record.cancelled,
        callback_id=record.callback_id,
        created_at=from_ms(record.created_at),
        finished_at=None if record.finished_at is None else from_ms(record.finished_at),
    )


def batch_jobs(
    jobs: Iterable[tuple[object, DispatchOptions]],
) -> list[tuple[object, DispatchOptions]]:
    """A batch's jobs as a list, refused (``jobs``) outside 1 to ``MAX_BATCH_JOBS``, having
    read at most one job past the limit."""
    rule = f"a batch has 1 to {MAX_BATCH_JOBS} jobs"
    return bounded_list("jobs", jobs, 1, MAX_BATCH_JOBS, rule)


def prepare_batch(
    registry: JobRegistry,
    options: QueueOptions,
    items: Iterable[tuple[object, DispatchOptions]],
    callback: tuple[object, DispatchOptions] | None,
    now: int,
) -> tuple[NewBatch, list[LinkedJob], LinkedJob | None]:
    """Validate and serialize a batch: its members (1 to ``MAX_BATCH_JOBS``, all of one tenant,
    none with an idempotency or pending key: each finish must count once) and its callback
    (held until the last member finishes; same tenant, no keys)."""
    items = batch_jobs(items)
    tenant = None
    for index, item in enumerate(items):
        dispatch = dispatch_of(item, f"jobs[{index}]")
        tenant = dispatch.tenant_id if tenant is None else tenant
        _check_member(f"jobs[{index}]", dispatch, tenant)
    assert tenant is not None
    batch_id = uuid7(now)
    members = [
        LinkedJob(job, batch_id=batch_id) for job in prepare_jobs(registry, options, items, now)
    ]
    held = None
    if callback is not None:
        dispatch = dispatch_of(callback, "callback")
        _check_member("callback", dispatch, tenant)
        for name, value in (("not_before", dispatch.not_before), ("delay", dispatch.delay)):
            if value is not None:
                rule = "a callback runs when its batch finishes"
                raise ValidationError(f"callback.{name}", rule)
        held = LinkedJob(prepare_job(registry, options, callback[0], dispatch, now), held=True)
    batch = NewBatch(batch_id, tenant, len(members), None if held is None else held.job.id, now)
    return batch, members, held


def _check_member(field: str, dispatch: DispatchOptions, tenant: str) -> None:
    if dispatch.tenant_id != tenant:
        raise ValidationError(f"{field}.tenant_id", "a batch and its callback have one tenant")
    if dispatch.idempotency_key is not None:
        raise ValidationError(
            f"{field}.idempotency_key", "a batch's jobs cannot have idempotency keys"
        )
    if dispatch.pending_key is not None:
        raise ValidationError(f"{field}.pending_key", "a batch's jobs cannot have pending keys")
