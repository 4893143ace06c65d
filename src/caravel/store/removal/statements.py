"""Cancellation and deletion on the SQL stores: the statements, in portable SQLAlchemy Core, and
the operations of :class:`~caravel.store.removal.selection.RemovalStore` that run them.

A cancel is one UPDATE: a waiting job and a running one alike end in ``cancelled`` with no
``available_at`` (so no claim ever sees it again) and a new lease token (so the worker running
it holds a stale lease: its completion, failure or renewal matches no row, exactly as after a
takeover). Only a running job gets ``cancel_requested_at``, which is how the statement's
returned rows say which jobs a worker must be told about, and whose attempts end as
``cancelled`` in the attempt history, in the same transaction. A delete removes finished rows
only, and their attempt records with them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from caravel.jobs import CancelOutcome, JobState
from caravel.limits import HELD_DUE_AT
from caravel.store import attempts
from caravel.store.protocol import JobRef
from caravel.store.queries import owned
from caravel.store.removal.selection import CANCELLABLE, DELETABLE, JobSelection
from caravel.store.schema import jobs
from caravel.store.transactions import Connection, ConnectionT, SqlTransactions

__all__ = ["SqlRemoval", "cancel", "delete", "kept_for_chain", "selected"]

RUNNING = JobState.RUNNING.value
READY = JobState.READY.value
DEAD = JobState.DEAD_LETTER.value
CANCELLED = JobState.CANCELLED.value
_CANCELLABLE = tuple(state.value for state in CANCELLABLE)
_DELETABLE = tuple(state.value for state in DELETABLE)


def selected(selection: JobSelection, *, deleting: bool) -> list[sa.ColumnElement[bool]]:
    """The conditions of the rows a bulk cancel (or delete) of ``selection`` acts on. The
    ``available_at`` test matches the partial index each kind of row is in (waiting and running
    rows in the claim index, finished ones in the finished index)."""
    allowed = _DELETABLE if deleting else _CANCELLABLE
    states = [state.value for state in selection.states if state.value in allowed]
    available = jobs.c.available_at.is_(None) if deleting else jobs.c.available_at.is_not(None)
    conditions = [jobs.c.queue == selection.queue, jobs.c.state.in_(states), available]
    if selection.job_type is not None:
        conditions.append(jobs.c.job_type == selection.job_type)
    if selection.tenant_id is not None:
        conditions.append(jobs.c.tenant_id == selection.tenant_id)
    if selection.before is not None:
        age = jobs.c.finished_at if deleting else jobs.c.created_at
        conditions.append(age < selection.before)
    if deleting:
        conditions.append(~kept_for_chain())
    return conditions


def _batch(conditions: list[sa.ColumnElement[bool]], limit: int) -> sa.ColumnElement[bool]:
    """At most ``limit`` of the rows ``conditions`` match, in no set order: unsorted, the
    database stops reading its index once it has found them (a row it takes leaves the
    selection, so the next batch finds the next ones)."""
    ids = sa.select(jobs.c.id).where(*conditions).limit(limit)
    return jobs.c.id.in_(ids.scalar_subquery())


def cancel(where: sa.ColumnElement[bool], now: int) -> sa.Update:
    """Cancel the waiting or running rows ``where`` matches; returns each one's id, lease token
    and, for a job that was running, ``cancel_requested_at`` (NULL for one that was waiting).
    The state is tested again here, not only where the rows are picked: a row claimed in
    between is cancelled as the running job it now is. A running job counts what the trim of
    its attempt history drops (see :data:`~caravel.store.attempts.CANCEL_KEEP`)."""
    keep: Any = sa.literal_column(str(attempts.CANCEL_KEEP))
    lost = sa.case((jobs.c.state == RUNNING, attempts.dropped(keep)), else_=sa.literal_column("0"))
    return (
        sa.update(jobs)
        .where(where, jobs.c.state.in_(_CANCELLABLE))
        .values(
            state=CANCELLED,
            available_at=None,
            lease_expires_at=None,
            finished_at=now,
            cancel_requested_at=sa.case((jobs.c.state == RUNNING, now), else_=sa.null()),
            lease_token=jobs.c.lease_token + 1,
            updated_at=now,
            attempts_dropped=jobs.c.attempts_dropped + lost,
        )
        .returning(jobs.c.id, jobs.c.cancel_requested_at, jobs.c.lease_token)
    )


def kept_for_chain() -> sa.ColumnElement[bool]:
    """A dead-lettered chain step whose next step is held: replaying it is the only way the
    chain resumes, so neither retention nor a delete removes it (cancelling the held steps
    gives the chain up, and frees it)."""
    following = jobs.alias("following")
    held = sa.exists().where(
        following.c.id == jobs.c.chain_next,
        following.c.state == READY,
        following.c.due_at == HELD_DUE_AT,
    )
    return sa.and_(jobs.c.state == DEAD, jobs.c.chain_next.is_not(None), held)


def delete(where: sa.ColumnElement[bool]) -> sa.Executable:
    """Delete the finished rows ``where`` matches, but no dead letter a held chain step waits
    for; returns their ids."""
    deletable = sa.and_(where, jobs.c.state.in_(_DELETABLE), ~kept_for_chain())
    return sa.delete(jobs).where(deletable).returning(jobs.c.id)


async def _deleted(conn: Connection, statement: sa.Executable) -> list[UUID]:
    """Run a delete of jobs (returning their ids) and delete their attempt records."""
    ids = list((await conn.execute(statement)).scalars())
    if ids:
        await conn.execute(attempts.records_deleted(), {"b_ids": ids})
    return ids


class SqlRemoval(SqlTransactions[ConnectionT]):
    """:class:`~caravel.store.removal.selection.RemovalStore` for the SQL stores."""

    async def _announce_cancelled(self, conn: ConnectionT, job_ids: list[UUID]) -> None:
        """Tell the workers running ``job_ids`` that they were cancelled, inside the cancel's
        transaction (PostgreSQL's NOTIFY); by default nothing: workers look by polling."""

    async def _cancel_rows(self, conn: ConnectionT, statement: sa.Update, now: int) -> list[Any]:
        rows = list(await conn.execute(statement))
        running = [row for row in rows if row.cancel_requested_at is not None]
        if running:
            ids = [row.id for row in running]
            await conn.execute(attempts.cancelled(), {"b_ids": ids, "b_now": now})
            keep = attempts.CANCEL_KEEP
            ended = [{"job_id": row.id, "lease_token": row.lease_token - 1} for row in running]
            trims = attempts.cuts(ended, keep)
            if trims:
                await conn.execute(attempts.trim(), trims)
            await self._announce_cancelled(conn, ids)
        return rows

    async def job_cancel(self, ref: JobRef, now: int) -> CancelOutcome:
        async def run() -> CancelOutcome:
            async with self._write("job_cancel") as conn:
                rows = await self._cancel_rows(conn, cancel(owned(ref), now), now)
                if rows:
                    running = rows[0].cancel_requested_at is not None
                    return CancelOutcome.CANCELLED_RUNNING if running else CancelOutcome.CANCELLED
                found = await conn.execute(sa.select(jobs.c.state).where(owned(ref)))
                if found.scalar_one_or_none() is None:
                    return CancelOutcome.NOT_FOUND
                return CancelOutcome.ALREADY_FINISHED

        return await self._deadlock_retried(run)

    async def job_cancel_many(self, selection: JobSelection, now: int, limit: int) -> int:
        where = _batch(selected(selection, deleting=False), limit)

        async def run() -> int:
            async with self._write("job_cancel_many") as conn:
                return len(await self._cancel_rows(conn, cancel(where, now), now))

        return await self._deadlock_retried(run)

    async def job_delete(self, ref: JobRef) -> bool:
        async with self._write("job_delete") as conn:
            return bool(await _deleted(conn, delete(owned(ref))))

    async def job_delete_many(self, selection: JobSelection, limit: int) -> int:
        where = _batch(selected(selection, deleting=True), limit)
        async with self._write("job_delete_many") as conn:
            return len(await _deleted(conn, delete(where)))

    async def job_count_selected(
        self, selection: JobSelection, *, deleting: bool
    ) -> dict[JobState, int]:
        conditions = selected(selection, deleting=deleting)
        stmt: sa.Select[Any] = (
            sa.select(jobs.c.state, sa.func.count().label("jobs"))
            .where(*conditions)
            .group_by(jobs.c.state)
            .order_by(jobs.c.state)
        )
        async with self._read("job_count_selected") as conn:
            rows = (await conn.execute(stmt)).all()
        return {JobState(row.state): int(row.jobs) for row in rows}

    async def job_cancelled_among(self, job_ids: Sequence[UUID]) -> set[UUID]:
        if not job_ids:
            return set()
        stmt = sa.select(jobs.c.id).where(jobs.c.id.in_(job_ids), jobs.c.state == CANCELLED)
        async with self._read("job_cancelled_among") as conn:
            return set((await conn.execute(stmt)).scalars())

    def cancel_notices(self) -> AsyncIterator[UUID] | None:
        return None
