"""The store operations that end or remove jobs on an operator's word: cancel one job or many,
delete finished ones, count what a selection would touch, and tell workers which of their jobs
were cancelled under them.

Kept apart from :mod:`caravel.store.protocol` (whose :class:`~caravel.store.protocol.Store`
includes this protocol) so that the whole of one concept reads in one package,
:mod:`caravel.store.removal`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol
from uuid import UUID

from caravel.jobs import CancelOutcome, JobState

if TYPE_CHECKING:  # protocol.py builds its Store from this module's protocol
    from caravel.store.protocol import JobRef

__all__ = [
    "CANCELLABLE",
    "DELETABLE",
    "JobSelection",
    "RemovalStore",
]

#: The stored states a cancel can end: waiting (ready, delayed, due for a retry) and running.
CANCELLABLE: tuple[JobState, ...] = (JobState.READY, JobState.RUNNING)
#: The stored states a delete can remove: the end states.
DELETABLE: tuple[JobState, ...] = (JobState.COMPLETED, JobState.DEAD_LETTER, JobState.CANCELLED)


@dataclass(frozen=True, slots=True)
class JobSelection:
    """The jobs of one queue a bulk cancel or delete acts on (every given field must match).

    ``states`` are stored states; an operation only ever touches the ones it can
    (:data:`CANCELLABLE`, :data:`DELETABLE`), whatever else is named. ``before`` is a time in
    ms since the epoch: a cancel takes jobs created before it, a delete jobs that finished before
    it."""

    queue: str
    states: tuple[JobState, ...]
    job_type: str | None = None
    tenant_id: str | None = None
    before: int | None = None


class RemovalStore(Protocol):
    """Cancellation and deletion, on every store."""

    async def job_cancel(self, ref: JobRef, now: int) -> CancelOutcome:
        """Cancel the job ``ref`` names. A waiting job moves to ``cancelled`` at once; a running
        one too, in the same statement with its lease token bumped (its worker's later writes
        are fenced) and ``cancel_requested_at`` set, its attempt recorded as ``cancelled`` in
        the same transaction, and its worker is told where the database can push
        (:meth:`cancel_notices`). A finished job is left as it is."""
        ...

    async def job_cancel_many(self, selection: JobSelection, now: int, limit: int) -> int:
        """Cancel up to ``limit`` of the waiting or running jobs ``selection`` matches (which
        ones is up to the store), as :meth:`job_cancel` cancels one; how many were cancelled.
        Callers repeat it until it cancels fewer than ``limit``, so no transaction holds many
        rows."""
        ...

    async def job_delete(self, ref: JobRef) -> bool:
        """Delete the finished (completed, dead-lettered or cancelled) job ``ref`` names, with
        its attempt records; false, and nothing changed, for any other job."""
        ...

    async def job_delete_many(self, selection: JobSelection, limit: int) -> int:
        """Delete up to ``limit`` of the finished jobs ``selection`` matches; how many."""
        ...

    async def job_count_selected(
        self, selection: JobSelection, *, deleting: bool
    ) -> dict[JobState, int]:
        """How many jobs per stored state :meth:`job_cancel_many` (or, ``deleting``,
        :meth:`job_delete_many`) would touch now: a dry run. States with none are left out."""
        ...

    async def job_cancelled_among(self, job_ids: Sequence[UUID]) -> set[UUID]:
        """Which of ``job_ids`` are cancelled: a worker's look at the jobs it runs, where the
        database cannot push :meth:`cancel_notices`."""
        ...

    def cancel_notices(self) -> AsyncIterator[UUID] | None:
        """The ids of running jobs as they are cancelled (any queue), where the database can
        push them (PostgreSQL's NOTIFY); ``None`` elsewhere."""
        ...
