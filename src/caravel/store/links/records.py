"""What the store takes and returns for chains and batches: a job with its links, a new batch,
and a batch's row. Plain values, like :mod:`caravel.store.values`.

A chain's steps are inserted together: the first ready as any job, each later one *held* (due
at :data:`~caravel.limits.HELD_DUE_AT`, past every claim's horizon) and named by the step
before it as ``chain_next``. A batch's members are ordinary jobs carrying its id, and its
callback a held job the batch row names. A chain, and a batch with a callback, are inserted as
workflows too (:mod:`caravel.store.links.graph`), whose triggers release the held jobs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol
from uuid import UUID

from caravel.jobs import JobStatus
from caravel.store.values import NewJob

__all__ = ["BatchRecord", "LinkReads", "LinkWrites", "LinkedJob", "NewBatch"]


class LinkedJob(NamedTuple):
    """A validated job and its place in a chain or a batch."""

    job: NewJob
    held: bool = False
    chain_id: UUID | None = None
    chain_step: int | None = None
    chain_next: UUID | None = None
    batch_id: UUID | None = None


@dataclass(frozen=True, slots=True)
class NewBatch:
    """A batch to create: its id, tenant, how many jobs it has, and its held callback's id."""

    id: UUID
    tenant_id: str
    total: int
    callback_id: UUID | None
    created_at: int


@dataclass(frozen=True, slots=True)
class BatchRecord:
    """A batch's row: its counts per end state (the rest are pending), and when every job had
    finished the first time (``None`` until then). Times in ms since the epoch."""

    id: UUID
    tenant_id: str
    total: int
    completed: int
    dead_letter: int
    cancelled: int
    callback_id: UUID | None
    created_at: int
    finished_at: int | None
    updated_at: int

    @property
    def pending(self) -> int:
        return self.total - self.completed - self.dead_letter - self.cancelled


class LinkReads(Protocol):
    """Reading chains and batches (operators' tools read these too)."""

    async def chain_steps(self, chain_id: UUID, tenant_id: str | None) -> list[JobStatus]:
        """The steps of chain ``chain_id`` by step, with their results, of this exact tenant
        (any tenant when ``None``: operators); empty when there is no such chain."""
        ...

    async def batch_get(self, batch_id: UUID, tenant_id: str | None) -> BatchRecord | None:
        """Batch ``batch_id`` of this exact tenant (any tenant when ``None``)."""
        ...

    async def batch_list(self, limit: int, offset: int = 0) -> list[BatchRecord]:
        """Batches of every tenant, newest first."""
        ...

    async def job_find(self, job_id: UUID) -> JobStatus | None:
        """The job with this id, whatever its queue and tenant (operators only: a batch names
        its callback by id alone, and a link to it needs its queue and tenant)."""
        ...


class LinkWrites(Protocol):
    """Creating chains and batches."""

    async def chain_insert(self, steps: Sequence[LinkedJob]) -> tuple[list[UUID], bool]:
        """Insert a chain's steps in one transaction; the step ids and whether they were
        created. When the first step's idempotency key names an existing job with the same
        type and payload, nothing is inserted and the ids are that job's chain's; with other
        content, or when that job is no chain's first step,
        :class:`~caravel.errors.IdempotencyConflictError` is raised."""
        ...

    async def batch_insert(
        self, batch: NewBatch, members: Sequence[LinkedJob], callback: LinkedJob | None
    ) -> None:
        """Insert a batch's row, its members and its held callback in one transaction."""
        ...
