"""Workflows on the SQL stores (see :mod:`caravel.store.workflows`): the insert, written as a
plan over the general insert so it runs on the store's connections and on the caller's alike,
signals, cancels and the reads. Releasing a held step is the database's work (the triggers of
migration 0021; on MariaDB the store's release pass), not this module's."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from caravel.errors import IdempotencyConflictError
from caravel.limits import HELD_DUE_AT
from caravel.store.inserts.general import SqlInserts
from caravel.store.plans import Plan, Step, run_plan
from caravel.store.removal.statements import SqlRemoval, cancel
from caravel.store.rows import job_row
from caravel.store.schema import (
    jobs,
    workflow_edges,
    workflow_signals,
    workflow_steps,
    workflows,
)
from caravel.store.transactions import ConnectionT
from caravel.store.values import Committed
from caravel.store.workflows.counts import counts_plan, record_of
from caravel.store.workflows.records import (
    NewStep,
    NewWorkflow,
    StepDependency,
    StepRecord,
    StepResult,
    StepWait,
    WorkflowRecord,
)

__all__ = ["SqlWorkflows", "graph_plan", "step_upstream", "workflow_row"]

#: Step and edge rows per executemany: large, since the rows are narrow and the driver pages
#: a multi-row INSERT itself.
_SIDE_CHUNK = 5_000
_FAILED = ("dead_letter", "cancelled")


def step_upstream(workflow_id: UUID, step: NewStep) -> str:
    """What a step's job is handed from the start: where it stands in its workflow (the runner
    builds ``ctx.workflow`` from it). A step handed a result gets ``"result"`` added in front
    on its release."""
    place = {"id": str(workflow_id), "step": step.step, "index": step.index}
    return json.dumps({"workflow": place}, separators=(",", ":"))


def _waits(step: NewStep) -> int:
    return len(step.after) + (1 if step.wait_signal is not None else 0)


def _job_row(workflow: NewWorkflow, step: NewStep) -> dict[str, Any]:
    """A step's job row: held while it waits for anything, else due at once (after its delay);
    a step waiting only for a signal, with a timeout, is due when the timeout passes."""
    row = job_row(step.job)
    row["workflow_id"] = workflow.id
    row["upstream"] = step_upstream(workflow.id, step)
    waiting = _waits(step)
    if waiting == 0:
        due = max(step.job.due_at, workflow.created_at + (step.delay_ms or 0))
    elif not step.after and step.timeout_ms is not None:
        due = workflow.created_at + step.timeout_ms
    else:
        due = HELD_DUE_AT
    row["due_at"] = row["available_at"] = due
    return row


def _step_row(workflow: NewWorkflow, step: NewStep, held: bool) -> dict[str, Any]:
    return {
        "job_id": step.job.id,
        "workflow_id": workflow.id,
        "step": step.step,
        "step_index": step.index,
        "waiting": _waits(step),
        "on_failure": step.on_failure,
        "wait_signal": step.wait_signal,
        "signal_received_at": None,
        "delay_ms": step.delay_ms,
        "timeout_ms": step.timeout_ms,
        "released_at": None if held else workflow.created_at,
    }


def _edge_rows(workflow: NewWorkflow) -> Iterator[dict[str, Any]]:
    for step in workflow.steps:
        for parent in step.after:
            yield {
                "parent_id": parent,
                "child_id": step.job.id,
                "workflow_id": workflow.id,
                "runs_after_failure": step.on_failure == "continue",
                "hands_result": step.hands_result,
                "satisfied": False,
            }


def _chunks(rows: Sequence[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    for start in range(0, len(rows), size):
        yield list(rows[start : start + size])


def workflow_row(workflow: NewWorkflow) -> dict[str, Any]:
    """The workflow's own row in ``caravel_workflows``."""
    return {
        "id": workflow.id,
        "tenant_id": workflow.tenant_id,
        "name": workflow.name,
        "idempotency_key": workflow.idempotency_key,
        "content_hash": workflow.content_hash,
        "total": len(workflow.steps),
        "created_at": workflow.created_at,
        "cancelled_at": None,
        "updated_at": workflow.created_at,
        "pruned_at": None,
    }


def graph_plan(workflow: NewWorkflow, held: Sequence[bool]) -> Plan[None]:
    """Insert the workflow's step rows and edges (its jobs are in, each held or not as
    ``held`` says, step by step)."""
    steps = [_step_row(workflow, s, h) for s, h in zip(workflow.steps, held, strict=True)]
    for chunk in _chunks(steps, _SIDE_CHUNK):
        yield Step(sa.insert(workflow_steps), chunk)
    for chunk in _chunks(list(_edge_rows(workflow)), _SIDE_CHUNK):
        yield Step(sa.insert(workflow_edges), chunk)


def _same_or_conflict(row: Any, workflow: NewWorkflow) -> tuple[UUID, bool]:
    """An existing workflow under the key (or id): the same graph is this one, already there;
    another is a conflict."""
    if row.content_hash != workflow.content_hash:
        raise IdempotencyConflictError(row.id)
    return row.id, False


def _tenant(table: sa.Table, tenant_id: str | None) -> tuple[sa.ColumnElement[bool], ...]:
    return () if tenant_id is None else (table.c.tenant_id == tenant_id,)


def _live_workflow(workflow_id: UUID, tenant_id: str | None) -> sa.Select[Any]:
    return sa.select(workflows).where(
        workflows.c.id == workflow_id,
        workflows.c.pruned_at.is_(None),
        *_tenant(workflows, tenant_id),
    )


_HELD = sa.and_(jobs.c.state == "ready", jobs.c.due_at == HELD_DUE_AT)


class SqlWorkflows(SqlRemoval[ConnectionT], SqlInserts[ConnectionT]):
    """:class:`~caravel.store.workflows.records.WorkflowWrites` and ``WorkflowReads`` for the
    SQL stores. The steps' jobs go in through the general insert's statement and chunk size,
    with the queues' wake-ups."""

    def _insert_ignoring(self, table: sa.Table) -> Any:
        """The dialect's INSERT into ``table`` that skips a row whose key is taken."""
        return type(self._insert())(table).on_conflict_do_nothing()

    # ----- writes ------------------------------------------------------------------------

    def _workflow_plan(self, workflow: NewWorkflow) -> Plan[tuple[UUID, bool]]:
        """The whole insert as a plan (for the store's transaction or the caller's): the
        workflow's row, then its jobs, step rows and edges in chunks; or the workflow its key
        (or id) already names."""
        existing = yield from self._existing_plan(workflow)
        if existing is not None:
            return _same_or_conflict(existing, workflow)
        row = workflow_row(workflow)
        insert = self._statement(
            "workflow_row",
            lambda: self._insert_ignoring(workflows).returning(workflows.c.id),
        )
        if not (yield Step(insert, row)):  # a concurrent insert under the key won
            existing = yield from self._existing_plan(workflow, by_id=True)
            if existing is None:  # pragma: no cover (the row that kept it out is there)
                raise IdempotencyConflictError(workflow.id)
            return _same_or_conflict(existing, workflow)
        job_rows = [_job_row(workflow, step) for step in workflow.steps]
        for chunk in _chunks(job_rows, self.insert_chunk):
            inserted = yield Step(self._insert_statement(), chunk)
            if len(inserted) != len(chunk):  # a step's id is taken: nothing of it is written
                taken = {row["id"] for row in chunk} - {row.id for row in inserted}
                raise IdempotencyConflictError(min(taken))
        yield from graph_plan(workflow, [row["due_at"] == HELD_DUE_AT for row in job_rows])
        due = {row["queue"] for row in job_rows if row["due_at"] <= workflow.created_at}
        yield from self._announce_plan(due)
        return workflow.id, True

    def _existing_plan(self, workflow: NewWorkflow, *, by_id: bool = False) -> Plan[Any]:
        """The workflow the new one's key names (of its tenant), else, with ``by_id``, the
        one with its id."""
        found: list[Any] = []
        if workflow.idempotency_key is not None:
            found = yield Step(
                sa.select(workflows.c.id, workflows.c.content_hash).where(
                    workflows.c.tenant_id == workflow.tenant_id,
                    workflows.c.idempotency_key == workflow.idempotency_key,
                )
            )
        if not found and by_id:
            found = yield Step(
                sa.select(workflows.c.id, workflows.c.content_hash).where(
                    workflows.c.id == workflow.id
                )
            )
        return found[0] if found else None

    async def workflow_insert(self, workflow: NewWorkflow) -> tuple[UUID, bool]:
        async with self._write("workflow_insert") as conn:
            return await run_plan(conn.execute, self._workflow_plan(workflow))

    async def workflow_insert_joined(
        self, target: object, workflow: NewWorkflow, *, on_commit: Committed = None
    ) -> tuple[UUID, bool]:
        from caravel.store.inserts import sessions

        store: Any = self  # a SqlStore: this is one of its bases
        return await sessions.workflow_async(store, target, workflow, on_commit)

    def workflow_insert_joined_sync(
        self,
        target: object,
        workflow: NewWorkflow,
        identity: str,
        *,
        on_commit: Committed = None,
    ) -> tuple[UUID, bool]:
        from caravel.store.inserts import sessions

        store: Any = self
        return sessions.workflow_sync(store, target, workflow, identity, on_commit)

    async def workflow_signal(
        self, workflow_id: UUID, tenant_id: str, name: str, payload: str, now: int
    ) -> bool:
        async with self._write("workflow_signal") as conn:
            if (await conn.execute(_live_workflow(workflow_id, tenant_id))).first() is None:
                return False
            insert = self._statement(
                "workflow_signal",
                lambda: self._insert_ignoring(workflow_signals).returning(workflow_signals.c.name),
            )
            row = {"workflow_id": workflow_id, "name": name, "payload": payload, "received_at": now}
            if not (await conn.execute(insert, row)).all():
                return False
            await self._signal_steps(conn, workflow_id, name, now)
        return True

    async def _signal_steps(
        self, conn: ConnectionT, workflow_id: UUID, name: str, now: int
    ) -> None:
        """Count the signal off every step of the workflow still waiting for it, and release
        those it was the last wait of. Only a step that has not started is touched: one whose
        timeout released it and that a worker already claimed runs timed out."""
        waiting = (
            sa.select(
                workflow_steps.c.job_id,
                workflow_steps.c.waiting,
                workflow_steps.c.released_at,
                workflow_steps.c.delay_ms,
                jobs.c.queue,
            )
            .join(jobs, jobs.c.id == workflow_steps.c.job_id)
            .where(
                workflow_steps.c.workflow_id == workflow_id,
                workflow_steps.c.wait_signal == name,
                workflow_steps.c.signal_received_at.is_(None),
                jobs.c.state == "ready",
            )
            .with_for_update()
        )
        rows = list(await conn.execute(waiting))
        if not rows:
            return
        await conn.execute(
            sa.update(workflow_steps)
            .where(workflow_steps.c.job_id.in_([row.job_id for row in rows]))
            .values(signal_received_at=now, waiting=workflow_steps.c.waiting - 1)
        )
        woken: set[str] = set()
        for row in rows:
            if row.waiting != 1:  # it still waits for dependencies
                continue
            if row.released_at is None:  # held: released now, after its delay
                due = now + (row.delay_ms or 0)
                where = sa.and_(jobs.c.id == row.job_id, _HELD)
            else:  # released by its timeout, not started: due now (or after its delay)
                due = max(now, row.released_at + (row.delay_ms or 0))
                where = sa.and_(jobs.c.id == row.job_id, jobs.c.state == "ready")
            await conn.execute(
                sa.update(jobs).where(where).values(due_at=due, available_at=due, updated_at=now)
            )
            if row.released_at is None:
                await conn.execute(
                    sa.update(workflow_steps)
                    .where(workflow_steps.c.job_id == row.job_id)
                    .values(released_at=now)
                )
            if due <= now:
                woken.add(row.queue)
        await run_plan(conn.execute, self._announce_plan(woken))

    async def workflow_cancel(self, workflow_id: UUID, tenant_id: str | None, now: int) -> int:
        async def run() -> int:
            async with self._write("workflow_cancel") as conn:
                if (await conn.execute(_live_workflow(workflow_id, tenant_id))).first() is None:
                    return 0
                await conn.execute(
                    sa.update(workflows)
                    .where(workflows.c.id == workflow_id)
                    .values(
                        cancelled_at=sa.func.coalesce(workflows.c.cancelled_at, now),
                        updated_at=now,
                    )
                )
                rows = await self._cancel_rows(
                    conn, cancel(jobs.c.workflow_id == workflow_id, now), now
                )
                return len(rows)

        return await self._deadlock_retried(run)

    # ----- reads -------------------------------------------------------------------------

    async def workflow_get(self, workflow_id: UUID, tenant_id: str | None) -> WorkflowRecord | None:
        async with self._read("workflow_get", single=False) as conn:
            row = (await conn.execute(_live_workflow(workflow_id, tenant_id))).first()
            if row is None:
                return None
            counts = await run_plan(conn.execute, counts_plan([row.id]))
        return record_of(row, counts[row.id])

    async def workflow_list(
        self, tenant_id: str | None, limit: int, offset: int = 0
    ) -> list[WorkflowRecord]:
        stmt = (
            sa.select(workflows)
            .where(workflows.c.pruned_at.is_(None), *_tenant(workflows, tenant_id))
            .order_by(workflows.c.created_at.desc(), workflows.c.id.desc())
            .limit(limit)
            .offset(offset)
        )
        async with self._read("workflow_list", single=False) as conn:
            rows = list(await conn.execute(stmt))
            counts = await run_plan(conn.execute, counts_plan([row.id for row in rows]))
        return [record_of(row, counts[row.id]) for row in rows]

    async def workflow_steps(
        self, workflow_id: UUID, tenant_id: str | None, limit: int, offset: int = 0
    ) -> list[StepRecord]:
        stmt = (
            sa.select(
                workflow_steps,
                jobs.c.queue,
                jobs.c.job_type,
                jobs.c.state,
                (jobs.c.due_at == HELD_DUE_AT).label("held"),
            )
            .join(jobs, jobs.c.id == workflow_steps.c.job_id)
            .where(workflow_steps.c.workflow_id == workflow_id, *_tenant(jobs, tenant_id))
            .order_by(workflow_steps.c.step, workflow_steps.c.step_index)
            .limit(limit)
            .offset(offset)
        )
        async with self._read("workflow_steps", single=False) as conn:
            if (await conn.execute(_live_workflow(workflow_id, tenant_id))).first() is None:
                return []
            rows = list(await conn.execute(stmt))
            parents = jobs.alias("parent")
            after: dict[UUID, list[tuple[UUID, bool]]] = {row.job_id: [] for row in rows}
            ids = list(after)
            for start in range(0, len(ids), self.insert_chunk):
                edges = (
                    sa.select(
                        workflow_edges.c.child_id,
                        workflow_edges.c.parent_id,
                        sa.and_(~workflow_edges.c.satisfied, parents.c.state.in_(_FAILED)).label(
                            "stops"
                        ),
                    )
                    .join(parents, parents.c.id == workflow_edges.c.parent_id)
                    .where(workflow_edges.c.child_id.in_(ids[start : start + self.insert_chunk]))
                )
                for edge in await conn.execute(edges):
                    after[edge.child_id].append((edge.parent_id, bool(edge.stops)))
        records = []
        for row in rows:
            held = row.state == "ready" and bool(row.held)
            records.append(
                StepRecord(
                    job_id=row.job_id,
                    queue=row.queue,
                    job_type=row.job_type,
                    step=row.step,
                    index=row.step_index,
                    state=row.state,
                    held=held,
                    waiting=row.waiting,
                    on_failure=row.on_failure,
                    wait_signal=row.wait_signal,
                    signal_received=row.signal_received_at is not None,
                    delay_ms=row.delay_ms,
                    timeout_ms=row.timeout_ms,
                    blocked=held and any(stops for _, stops in after[row.job_id]),
                    after=tuple(parent for parent, _ in after[row.job_id]),
                )
            )
        return records

    async def workflow_results(
        self,
        workflow_id: UUID,
        tenant_id: str,
        step: str,
        after_index: int | None,
        limit: int,
    ) -> list[StepResult]:
        later = () if after_index is None else (workflow_steps.c.step_index > after_index,)
        stmt = (
            sa.select(
                workflow_steps.c.job_id, workflow_steps.c.step_index, jobs.c.state, jobs.c.result
            )
            .join(jobs, jobs.c.id == workflow_steps.c.job_id)
            .where(
                workflow_steps.c.workflow_id == workflow_id,
                workflow_steps.c.step == step,
                jobs.c.tenant_id == tenant_id,
                *later,
            )
            .order_by(workflow_steps.c.step_index)
            .limit(limit)
        )
        async with self._read("workflow_results") as conn:
            return [
                StepResult(row.job_id, row.step_index, row.state, row.result)
                for row in await conn.execute(stmt)
            ]

    async def workflow_dependencies(
        self, job_id: UUID, failed_only: bool, limit: int
    ) -> list[StepDependency]:
        failed = (jobs.c.state.in_(_FAILED),) if failed_only else ()
        stmt = (
            sa.select(
                workflow_edges.c.parent_id,
                workflow_edges.c.satisfied,
                workflow_steps.c.step,
                workflow_steps.c.step_index,
                jobs.c.state,
            )
            .join(jobs, jobs.c.id == workflow_edges.c.parent_id)
            .join(workflow_steps, workflow_steps.c.job_id == workflow_edges.c.parent_id)
            .where(workflow_edges.c.child_id == job_id, *failed)
            .order_by(workflow_steps.c.step, workflow_steps.c.step_index)
            .limit(limit)
        )
        async with self._read("workflow_dependencies") as conn:
            return [
                StepDependency(
                    row.parent_id, row.step, row.step_index, row.state, bool(row.satisfied)
                )
                for row in await conn.execute(stmt)
            ]

    async def workflow_wait(self, job_id: UUID) -> StepWait | None:
        stmt = (
            sa.select(
                workflow_steps.c.wait_signal,
                workflow_steps.c.signal_received_at,
                workflow_signals.c.payload,
            )
            .outerjoin(
                workflow_signals,
                sa.and_(
                    workflow_signals.c.workflow_id == workflow_steps.c.workflow_id,
                    workflow_signals.c.name == workflow_steps.c.wait_signal,
                ),
            )
            .where(workflow_steps.c.job_id == job_id)
        )
        async with self._read("workflow_wait") as conn:
            row = (await conn.execute(stmt)).first()
        if row is None or row.wait_signal is None:
            return None
        if row.signal_received_at is None:
            return StepWait(signal=None, signal_payload=None, timed_out=True)
        return StepWait(signal=row.wait_signal, signal_payload=row.payload, timed_out=False)
