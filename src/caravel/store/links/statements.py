"""Chains and batches on the SQL stores (see :mod:`caravel.store.links`): their inserts, written
as plans over the general insert, and their reads. A chain, and a batch with a callback, go in
as the workflow each one is (:mod:`caravel.store.links.graph`), so releasing a held job is the
workflow release's work (the triggers of migration 0021), not this module's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from caravel.errors import IdempotencyConflictError
from caravel.jobs import JobStatus
from caravel.store.inserts.general import SqlInserts
from caravel.store.links.graph import batch_workflow, chain_workflow
from caravel.store.links.records import BatchRecord, LinkedJob, NewBatch
from caravel.store.plans import Plan, Step, outcomes_plan, run_plan
from caravel.store.rows import STATUS_COLUMNS, batch_from_row, linked_row, status_from_row
from caravel.store.schema import batches, jobs, workflows
from caravel.store.transactions import ConnectionT
from caravel.store.workflows.records import NewWorkflow
from caravel.store.workflows.statements import graph_plan, workflow_row

__all__ = ["SqlLinks"]


def _tenant(table: sa.Table, tenant_id: str | None) -> tuple[sa.ColumnElement[bool], ...]:
    return () if tenant_id is None else (table.c.tenant_id == tenant_id,)


class SqlLinks(SqlInserts[ConnectionT]):
    """:class:`~caravel.store.links.records.LinkReads` and ``LinkWrites`` for the SQL stores.
    A chain's or a batch's jobs go in through the general insert's statement, chunk size and
    wake-ups, so this family stands on :class:`SqlInserts` rather than beside it."""

    def _linked_plan(
        self, linked: Sequence[LinkedJob], workflow_id: UUID | None = None
    ) -> Plan[list[UUID]]:
        """Insert ``linked`` (the general INSERT, with their link columns, steps of workflow
        ``workflow_id`` when given); each one's id, its own or that of the row holding its
        idempotency key (conflicts raise)."""
        rows = [linked_row(one) for one in linked]
        for row in rows:
            row["workflow_id"] = workflow_id
        inserted = {row.id for row in (yield Step(self._insert_statement(), rows))}
        new_jobs = [one.job for one in linked]
        outcomes = yield from outcomes_plan(new_jobs, inserted, self.insert_chunk)
        due = {job.queue for job, one in zip(new_jobs, linked, strict=True) if not one.held}
        if inserted:
            yield from self._announce_plan(due)
        return [outcome.job_id for outcome in outcomes]

    async def _graph(self, conn: ConnectionT, workflow: NewWorkflow, held: list[bool]) -> None:
        """The workflow a chain or a batch is: its row, step rows and edges."""
        await conn.execute(sa.insert(workflows), workflow_row(workflow))
        await run_plan(conn.execute, graph_plan(workflow, held))

    async def chain_insert(self, steps: Sequence[LinkedJob]) -> tuple[list[UUID], bool]:
        workflow = chain_workflow(steps)
        async with self._write("chain_insert") as conn:
            plan = self._linked_plan(steps[:1], workflow.id)
            (first,) = await run_plan(conn.execute, plan)
            if first != steps[0].job.id:  # the first step's key named an existing job
                found = await conn.execute(
                    sa.select(jobs.c.id).where(jobs.c.chain_id == first).order_by(jobs.c.chain_step)
                )
                chained = list(found.scalars())
                if not chained:  # the key is a plain job's: this is not the chain it names
                    raise IdempotencyConflictError(first)
                return chained, False
            if len(steps) > 1:
                await run_plan(conn.execute, self._linked_plan(steps[1:], workflow.id))
            await self._graph(conn, workflow, [step.held for step in steps])
        return [step.job.id for step in steps], True

    async def batch_insert(
        self, batch: NewBatch, members: Sequence[LinkedJob], callback: LinkedJob | None
    ) -> None:
        row = {
            "id": batch.id,
            "tenant_id": batch.tenant_id,
            "total": batch.total,
            "completed": 0,
            "dead_letter": 0,
            "cancelled": 0,
            "callback_id": batch.callback_id,
            "created_at": batch.created_at,
            "finished_at": None,
            "updated_at": batch.created_at,
        }
        async with self._write("batch_insert") as conn:
            await conn.execute(sa.insert(batches), row)
            linked = [*members, callback] if callback is not None else list(members)
            workflow = batch_workflow(batch, members, callback)
            workflow_id = None if workflow is None else workflow.id
            for start in range(0, len(linked), self.insert_chunk):
                chunk = linked[start : start + self.insert_chunk]
                await run_plan(conn.execute, self._linked_plan(chunk, workflow_id))
            if workflow is not None:
                await self._graph(conn, workflow, [one.held for one in linked])

    async def chain_steps(self, chain_id: UUID, tenant_id: str | None) -> list[JobStatus]:
        stmt = (
            sa.select(*STATUS_COLUMNS, jobs.c.result)
            .where(jobs.c.chain_id == chain_id, *_tenant(jobs, tenant_id))
            .order_by(jobs.c.chain_step)
        )
        async with self._read("chain_steps") as conn:
            return [status_from_row(row, row.result) for row in await conn.execute(stmt)]

    async def batch_get(self, batch_id: UUID, tenant_id: str | None) -> BatchRecord | None:
        stmt = sa.select(batches).where(batches.c.id == batch_id, *_tenant(batches, tenant_id))
        async with self._read("batch_get") as conn:
            row = (await conn.execute(stmt)).one_or_none()
        return None if row is None else batch_from_row(row)

    async def job_find(self, job_id: UUID) -> JobStatus | None:
        stmt = sa.select(*STATUS_COLUMNS).where(jobs.c.id == job_id)
        async with self._read("job_find") as conn:
            row = (await conn.execute(stmt)).one_or_none()
        return None if row is None else status_from_row(row)

    async def batch_list(self, limit: int, offset: int = 0) -> list[BatchRecord]:
        stmt: sa.Select[Any] = (
            sa.select(batches)
            .order_by(batches.c.created_at.desc(), batches.c.id.desc())
            .limit(limit)
            .offset(offset)
        )
        async with self._read("batch_list") as conn:
            return [batch_from_row(row) for row in await conn.execute(stmt)]
