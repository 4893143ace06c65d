""" "One pending per key" in the in-memory store, as :mod:`caravel.store.inserts.pending` does it
in SQL: a job with a pending key settled against the one ready job under its queue, tenant and
key, and a job made ready again giving up a key another job now holds."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from caravel.errors import PendingKeyConflictError
from caravel.jobs import JobState
from caravel.store.memory.tables import JobRow, Tables
from caravel.store.values import InsertOutcome, NewJob

__all__ = ["give_up_taken_key", "settle_pending"]

READY = JobState.READY.value


def _pending(row: JobRow, queue: str, tenant_id: str, key: str | None) -> bool:
    return (
        row.state == READY
        and row.pending_key == key
        and row.queue == queue
        and row.tenant_id == tenant_id
    )


def _holder(tables: Tables, staged: dict[UUID, JobRow], job: NewJob) -> JobRow | None:
    """The job pending under ``job``'s key: inserted earlier in the same call, or stored (only
    the claim index's rows can be ready)."""
    args = (job.queue, job.tenant_id, job.pending_key)
    for row in staged.values():
        if _pending(row, *args):
            return row
    return next((row for row in tables.live_rows(job.queue) if _pending(row, *args)), None)


def settle_pending(
    tables: Tables,
    staged: dict[UUID, JobRow],
    changes: dict[UUID, dict[str, Any]],
    job: NewJob,
) -> InsertOutcome | None:
    """The outcome of ``job`` (which has a pending key) when a job is pending under its key,
    or ``None`` when it is to be inserted. A replaced stored row's new values go into
    ``changes`` (applied once the whole call has settled: a later conflict keeps nothing); a
    row staged in this call is changed at once. Raises
    :class:`~caravel.errors.PendingKeyConflictError` for a pending job of another type."""
    row = _holder(tables, staged, job)
    if row is None:
        return None
    if row.job_type != job.job_type:
        raise PendingKeyConflictError(row.id, job.queue)
    if job.debounce_ms is None:
        return InsertOutcome(row.id, inserted=False)
    due = min(job.due_at, row.created_at + job.debounce_ms)
    values = {
        "payload": job.payload,
        "due_at": due,
        "available_at": due,
        "trace_context": job.trace_context,
        "updated_at": job.created_at,
    }
    if row.id in staged:
        for name, value in values.items():
            setattr(row, name, value)
    else:
        changes[row.id] = values
    return InsertOutcome(row.id, inserted=False, replaced=True)


def give_up_taken_key(tables: Tables, row: JobRow) -> None:
    """``row``, being made ready again, gives up its pending key if another job is pending
    under it now."""
    if row.pending_key is None:
        return
    args = (row.queue, row.tenant_id, row.pending_key)
    if any(other.id != row.id and _pending(other, *args) for other in tables.live_rows(row.queue)):
        row.pending_key = None
