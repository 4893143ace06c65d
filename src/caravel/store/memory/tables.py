"""The in-memory store's state: its jobs and workers, as plain rows under one lock.

A row carries the same columns as the SQL tables (:mod:`caravel.store.schema`), so the shared
row readers in :mod:`caravel.store.rows` turn it into statuses, claimed jobs and worker records
exactly as they turn a database row, and the two kinds of store cannot drift apart there.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from uuid import UUID

from caravel.store.protocol import NewJob
from caravel.store.rows import job_row

__all__ = ["JobRow", "Key", "Tables", "WorkerRow"]

#: An idempotency key's scope: (queue, tenant, key).
Key = tuple[str, str, str]


@dataclass(slots=True)
class JobRow:
    """One job, column for column as ``caravel_jobs`` holds it (times in ms since the epoch)."""

    id: UUID
    queue: str
    job_type: str
    tenant_id: str
    idempotency_key: str | None
    payload: str
    state: str
    attempt: int
    max_attempts: int
    due_at: int
    available_at: int | None
    lease_token: int
    created_at: int
    updated_at: int
    trace_context: str | None
    lease_expires_at: int | None = None
    started_at: int | None = None
    finished_at: int | None = None
    last_failure: str | None = None
    result: str | None = None
    error_class: str | None = None
    tags: str | None = None
    snoozes: int = 0
    cancel_requested_at: int | None = None
    content_hash: str | None = None
    pruned_at: int | None = None
    priority: int = 0
    pending_key: str | None = None
    #: Insertion order, as a SQLite rowid: what breaks a tie between jobs available at the
    #: same moment (the SQL stores' claim then takes them in the order they were stored).
    rowid: int = 0

    @classmethod
    def new(cls, job: NewJob) -> JobRow:
        """The row every insert path writes for ``job`` (the SQL stores' own values)."""
        return cls(**job_row(job))

    @property
    def key(self) -> Key | None:
        if self.idempotency_key is None:
            return None
        return (self.queue, self.tenant_id, self.idempotency_key)


@dataclass(slots=True)
class WorkerRow:
    """One worker, column for column as ``caravel_workers`` holds it."""

    id: UUID
    host: str
    pid: int
    queues: str
    concurrency: int
    started_at: int
    heartbeat_at: int
    in_flight: int
    stopped_at: int | None


class Tables:
    """Every job and worker of one in-memory queue. Callers hold :attr:`lock` around each whole
    operation (nothing inside one awaits), which makes each operation atomic, as a transaction
    is, for every thread and event loop of the process that shares these tables."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.jobs: dict[UUID, JobRow] = {}
        #: The unique idempotency index: only keyed jobs have an entry.
        self.keys: dict[Key, UUID] = {}
        #: Per queue, the ids of jobs a claim may take (``available_at`` set), as the partial
        #: claim index holds them: a claim never walks the finished history.
        self.live: dict[str, set[UUID]] = {}
        self.workers: dict[UUID, WorkerRow] = {}
        #: ``caravel_queues`` as queue -> ``paused_at``, for the queues paused now.
        self.paused: dict[str, int] = {}
        #: ``caravel_schedules`` as name -> [last_slot_at, paused_at].
        self.schedules: dict[str, list[int | None]] = {}
        self._rowids = itertools.count(1)

    def add(self, row: JobRow) -> None:
        row.rowid = next(self._rowids)
        self.jobs[row.id] = row
        if row.key is not None:
            self.keys[row.key] = row.id
        self.track(row)

    def remove(self, row: JobRow) -> None:
        """Delete ``row``, with its idempotency key and any claim index entry."""
        del self.jobs[row.id]
        if row.key is not None and self.keys.get(row.key) == row.id:
            del self.keys[row.key]
        self.live.get(row.queue, set()).discard(row.id)

    def track(self, row: JobRow) -> None:
        """Keep the claim index in step with ``row.available_at`` after any change to it."""
        if row.available_at is None:
            self.live.get(row.queue, set()).discard(row.id)
        else:
            self.live.setdefault(row.queue, set()).add(row.id)

    def live_rows(self, queue: str) -> Iterator[JobRow]:
        jobs = self.jobs
        return (jobs[job_id] for job_id in self.live.get(queue, ()))
