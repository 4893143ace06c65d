"""An insert into the in-memory store: each new job stored, or answered by the row that keeps
it out (its idempotency key's holder, or its id's), or settled against its pending key's job
(:mod:`caravel.store.memory.pending`), as the SQL stores' inserts do; a conflict leaves
nothing behind."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from caravel.errors import IdempotencyConflictError
from caravel.store.memory.pending import settle_pending
from caravel.store.memory.tables import JobRow, Key, Tables
from caravel.store.protocol import AllInserted, InsertOutcome, InsertResult, NewJob
from caravel.store.queries import same_content

__all__ = ["insert_all"]


def insert_all(tables: Tables, new_jobs: list[NewJob]) -> InsertResult:
    """Insert ``new_jobs`` into ``tables`` (the caller holds their lock), all or nothing."""
    staged: dict[UUID, JobRow] = {}
    staged_keys: dict[Key, UUID] = {}
    changes: dict[UUID, dict[str, Any]] = {}
    outcomes: list[InsertOutcome] = []
    for job in new_jobs:
        if job.pending_key is not None:
            settled = settle_pending(tables, staged, changes, job)
            if settled is not None:
                outcomes.append(settled)
                continue
            held = None
        else:
            held = _holder(tables, staged, staged_keys, job)
        if held is not None:
            if not same_content(held, job):
                raise IdempotencyConflictError(held.id)  # nothing staged is kept
            outcomes.append(InsertOutcome(held.id, inserted=False))
            continue
        row = staged[job.id] = JobRow.new(job)
        if row.key is not None:
            staged_keys[row.key] = row.id
        outcomes.append(InsertOutcome(row.id, inserted=True))
    for row in staged.values():
        tables.add(row)
    for job_id, values in changes.items():
        changed = tables.jobs[job_id]
        for name, value in values.items():
            setattr(changed, name, value)
        tables.track(changed)
    if len(staged) == len(new_jobs):
        return InsertResult(new_jobs, AllInserted(new_jobs))
    return InsertResult(new_jobs, outcomes)


def _holder(
    tables: Tables, staged: dict[UUID, JobRow], staged_keys: dict[Key, UUID], job: NewJob
) -> JobRow | None:
    """The row that keeps ``job`` out, stored or inserted earlier in the same call: the one
    holding its idempotency key first, else the one holding its id (as the SQL stores look)."""
    if job.idempotency_key is not None:
        key = (job.queue, job.tenant_id, job.idempotency_key)
        holder = staged_keys.get(key) or tables.keys.get(key)
        if holder is not None:
            return staged.get(holder) or tables.jobs[holder]
    return staged.get(job.id) or tables.jobs.get(job.id)
