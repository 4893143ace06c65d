"""The in-memory store's cancels and deletes, row for row as the SQL statements of
:mod:`caravel.store.removal.statements` change them (the conformance suite holds both to it).
Workers learn of cancels by looking (:meth:`job_cancelled_among`): there is nothing to push."""

from __future__ import annotations

import heapq
from collections.abc import AsyncIterator, Iterator, Sequence
from uuid import UUID

from caravel.attempts import AttemptOutcome
from caravel.jobs import CancelOutcome, JobState
from caravel.store.attempts import CANCEL_KEEP
from caravel.store.memory.reads import MemoryReader
from caravel.store.memory.tables import JobRow, Tables
from caravel.store.protocol import JobRef
from caravel.store.removal import CANCELLABLE, DELETABLE, JobSelection

__all__ = ["MemoryRemoval"]

RUNNING = JobState.RUNNING.value
CANCELLED = JobState.CANCELLED.value
_CANCELLABLE = frozenset(state.value for state in CANCELLABLE)
_DELETABLE = frozenset(state.value for state in DELETABLE)


class MemoryRemoval(MemoryReader):
    """:class:`~caravel.store.removal.selection.RemovalStore` over the in-memory tables."""

    async def job_cancel(self, ref: JobRef, now: int) -> CancelOutcome:
        with self._locked("job_cancel") as tables:
            row = self._owned(tables, ref)
            if row is None:
                return CancelOutcome.NOT_FOUND
            if row.state not in _CANCELLABLE:
                return CancelOutcome.ALREADY_FINISHED
            was_running = row.state == RUNNING
            cancel_row(tables, row, now)
        return CancelOutcome.CANCELLED_RUNNING if was_running else CancelOutcome.CANCELLED

    async def job_cancel_many(self, selection: JobSelection, now: int, limit: int) -> int:
        with self._locked("job_cancel_many") as tables:
            picked = _oldest(_selected(tables, selection, deleting=False), limit)
            for row in picked:
                cancel_row(tables, row, now)
            return len(picked)

    async def job_delete(self, ref: JobRef) -> bool:
        with self._locked("job_delete") as tables:
            row = self._owned(tables, ref)
            if row is None or row.state not in _DELETABLE or tables.kept_for_chain(row):
                return False
            tables.remove(row)
        return True

    async def job_delete_many(self, selection: JobSelection, limit: int) -> int:
        with self._locked("job_delete_many") as tables:
            picked = _oldest(_selected(tables, selection, deleting=True), limit)
            for row in picked:
                tables.remove(row)
            return len(picked)

    async def job_count_selected(
        self, selection: JobSelection, *, deleting: bool
    ) -> dict[JobState, int]:
        with self._locked("job_count_selected") as tables:
            counted: dict[JobState, int] = {}
            for row in _selected(tables, selection, deleting=deleting):
                state = JobState(row.state)
                counted[state] = counted.get(state, 0) + 1
        return dict(sorted(counted.items()))

    async def job_cancelled_among(self, job_ids: Sequence[UUID]) -> set[UUID]:
        with self._locked("job_cancelled_among") as tables:
            return {
                job_id
                for job_id in job_ids
                if (row := tables.jobs.get(job_id)) is not None and row.state == CANCELLED
            }

    def cancel_notices(self) -> AsyncIterator[UUID] | None:
        return None


def cancel_row(tables: Tables, row: JobRow, now: int) -> None:
    """What ``removal.statements.cancel`` does to one waiting or running row (a running one's
    attempt ends as ``cancelled``, as ``attempts.cancelled`` records it)."""
    if row.state == RUNNING:
        tables.record_ended(row, AttemptOutcome.CANCELLED.value, now, CANCEL_KEEP, None)
    row.cancel_requested_at = now if row.state == RUNNING else None
    row.state = CANCELLED
    row.available_at = row.lease_expires_at = None
    row.finished_at = row.updated_at = now
    row.lease_token += 1
    tables.track(row)


def _selected(tables: Tables, selection: JobSelection, *, deleting: bool) -> Iterator[JobRow]:
    """The rows ``removal.statements.selected`` matches."""
    allowed = _DELETABLE if deleting else _CANCELLABLE
    states = {state.value for state in selection.states} & allowed
    for row in tables.jobs.values():
        if row.queue != selection.queue or row.state not in states:
            continue
        if selection.job_type is not None and row.job_type != selection.job_type:
            continue
        if selection.tenant_id is not None and row.tenant_id != selection.tenant_id:
            continue
        if selection.before is not None:
            age = row.finished_at if deleting else row.created_at
            if age is None or age >= selection.before:
                continue
        if deleting and tables.kept_for_chain(row):
            continue
        yield row


def _oldest(rows: Iterator[JobRow], limit: int) -> list[JobRow]:
    return heapq.nsmallest(limit, rows, key=lambda row: (row.created_at, row.rowid))
