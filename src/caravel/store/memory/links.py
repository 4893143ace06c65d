"""Chains and batches over the in-memory tables, as :mod:`caravel.store.links.statements` does them
in SQL: their jobs, and the workflow each one is (:mod:`caravel.store.links.graph`). Releases
happen in :meth:`~caravel.store.memory.tables.Tables.track`, the workflow's release, as the SQL
stores' triggers do them in the statement that changes a job's state."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from caravel.errors import IdempotencyConflictError
from caravel.jobs import JobStatus
from caravel.store.links import BatchRecord, LinkedJob, NewBatch
from caravel.store.links.graph import batch_workflow, chain_workflow
from caravel.store.memory.reads import MemoryReader
from caravel.store.memory.tables import BatchRow, JobRow, Tables
from caravel.store.memory.workflow_tables import is_held
from caravel.store.queries import same_content
from caravel.store.rows import batch_from_row, linked_row, status_from_row
from caravel.store.workflows.records import NewWorkflow

__all__ = ["MemoryLinkReads", "MemoryLinks"]


def _add(tables: Tables, linked: Sequence[LinkedJob], workflow: NewWorkflow | None) -> None:
    for one in linked:
        row = JobRow(**linked_row(one))
        row.workflow_id = None if workflow is None else workflow.id
        tables.add(row)
    if workflow is None:
        return
    for step in tables.workflows.add_graph(workflow):
        if not is_held(tables.jobs[step.job_id]):
            step.released_at = workflow.created_at


class MemoryLinkReads(MemoryReader):
    """Reading chains and batches."""

    async def chain_steps(self, chain_id: UUID, tenant_id: str | None) -> list[JobStatus]:
        with self._locked("chain_steps") as tables:
            steps = [
                row
                for row in tables.jobs.values()
                if row.chain_id == chain_id and tenant_id in (None, row.tenant_id)
            ]
            steps.sort(key=lambda row: row.chain_step or 0)
            return [status_from_row(row, row.result) for row in steps]

    async def batch_get(self, batch_id: UUID, tenant_id: str | None) -> BatchRecord | None:
        with self._locked("batch_get") as tables:
            row = tables.batches.get(batch_id)
            if row is None or tenant_id not in (None, row.tenant_id):
                return None
            return batch_from_row(row)

    async def job_find(self, job_id: UUID) -> JobStatus | None:
        with self._locked("job_find") as tables:
            row = tables.jobs.get(job_id)
            return None if row is None else status_from_row(row)

    async def batch_list(self, limit: int, offset: int = 0) -> list[BatchRecord]:
        with self._locked("batch_list") as tables:
            rows = sorted(tables.batches.values(), key=lambda b: (b.created_at, b.id))
            rows.reverse()
            return [batch_from_row(row) for row in rows[offset : offset + limit]]


class MemoryLinks(MemoryLinkReads):
    """Creating chains and batches."""

    async def chain_insert(self, steps: Sequence[LinkedJob]) -> tuple[list[UUID], bool]:
        first = steps[0].job
        with self._locked("chain_insert") as tables:
            if first.idempotency_key is not None:
                key = (first.queue, first.tenant_id, first.idempotency_key)
                holder = tables.keys.get(key)
                if holder is not None:
                    row = tables.jobs[holder]
                    if not same_content(row, first):
                        raise IdempotencyConflictError(row.id)
                    chained = [r for r in tables.jobs.values() if r.chain_id == row.id]
                    chained.sort(key=lambda r: r.chain_step or 0)
                    if not chained:  # the key is a plain job's, not this chain's
                        raise IdempotencyConflictError(row.id)
                    return [r.id for r in chained], False
            _add(tables, steps, chain_workflow(steps))
        return [step.job.id for step in steps], True

    async def batch_insert(
        self, batch: NewBatch, members: Sequence[LinkedJob], callback: LinkedJob | None
    ) -> None:
        with self._locked("batch_insert") as tables:
            tables.batches[batch.id] = BatchRow(
                id=batch.id,
                tenant_id=batch.tenant_id,
                total=batch.total,
                callback_id=batch.callback_id,
                created_at=batch.created_at,
                updated_at=batch.created_at,
            )
            linked = [*members, callback] if callback is not None else list(members)
            _add(tables, linked, batch_workflow(batch, members, callback))
