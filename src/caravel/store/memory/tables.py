"""The in-memory store's state: its jobs, their attempt records and the workers, as plain rows
under one lock.

A row carries the same columns as the SQL tables (:mod:`caravel.store.schema`), so the shared
row readers in :mod:`caravel.store.rows` turn it into statuses, claimed jobs and worker records
exactly as they turn a database row, and the two kinds of store cannot drift apart there.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from caravel.limits import HELD_DUE_AT
from caravel.store.memory.workflow_tables import WorkflowTables
from caravel.store.protocol import NewJob, QueueLimit
from caravel.store.rows import job_row

__all__ = ["AttemptRow", "BatchRow", "JobRow", "Key", "Tables", "WorkerRow", "partition_of"]

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
    partition_key: str | None = None
    weight: int | None = None
    chain_id: UUID | None = None
    chain_step: int | None = None
    chain_next: UUID | None = None
    batch_id: UUID | None = None
    workflow_id: UUID | None = None
    upstream: str | None = None
    timeout_ms: int | None = None
    progress: str | None = None
    progress_at: int | None = None
    meta: str | None = None
    worker_id: UUID | None = None
    attempts_dropped: int = 0
    lease_nonce: int | None = None
    #: The state the tables last saw (see :meth:`Tables.track`): not a column, the trigger's
    #: ``OLD.state``.
    seen_state: str = "ready"
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
class BatchRow:
    """One batch, column for column as ``caravel_batches`` holds it."""

    id: UUID
    tenant_id: str
    total: int
    callback_id: UUID | None
    created_at: int
    updated_at: int
    completed: int = 0
    dead_letter: int = 0
    cancelled: int = 0
    finished_at: int | None = None


@dataclass(slots=True)
class AttemptRow:
    """One attempt record, column for column as ``caravel_attempts`` holds it."""

    job_id: UUID
    lease_token: int
    attempt: int
    worker_id: UUID | None
    host: str | None
    pid: int | None
    claimed_at: int | None
    finished_at: int | None
    outcome: str
    category: str | None
    error_class: str | None
    detail: str | None
    retry_at: int | None


_END_STATES = ("completed", "dead_letter", "cancelled")


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
        #: ``caravel_attempts`` by job, oldest claim first.
        self.attempts: dict[UUID, list[AttemptRow]] = {}
        #: ``caravel_queues`` as queue -> ``paused_at``, for the queues paused now.
        self.paused: dict[str, int] = {}
        #: ``caravel_schedules`` as name -> [last_slot_at, paused_at].
        self.schedules: dict[str, list[int | None]] = {}
        self.batches: dict[UUID, BatchRow] = {}
        #: ``caravel_queue_limits`` by queue.
        self.limits: dict[str, QueueLimit] = {}
        #: ``caravel_queue_starts`` by queue: (started_at, key, weight), oldest first.
        self.starts: dict[str, list[tuple[int, str, int]]] = {}
        #: ``fair_cursor`` of ``caravel_queue_limits`` by queue: the key its last fair claim
        #: served last.
        self.fair_cursors: dict[str, str] = {}
        self.workflows = WorkflowTables()
        self._rowids = itertools.count(1)

    def add(self, row: JobRow) -> None:
        row.rowid = next(self._rowids)
        row.seen_state = row.state
        self.jobs[row.id] = row
        if row.key is not None:
            self.keys[row.key] = row.id
        self.track(row)

    def remove(self, row: JobRow) -> None:
        """Delete ``row``, with its idempotency key, any claim index entry and its attempt
        records."""
        del self.jobs[row.id]
        if row.key is not None and self.keys.get(row.key) == row.id:
            del self.keys[row.key]
        self.live.get(row.queue, set()).discard(row.id)
        self.attempts.pop(row.id, None)

    def record(self, row: JobRow, record: dict[str, Any], keep: int) -> None:
        """Add ``record`` (:func:`caravel.store.attempts.record`'s columns) to ``row``'s
        attempt history, deleting the records of claims older than its last ``keep`` and
        counting them in ``attempts_dropped``, as the SQL stores' trim does."""
        history = self.attempts.setdefault(row.id, [])
        token = record["lease_token"]
        if token > keep:
            kept = [old for old in history if old.lease_token > token - keep]
            row.attempts_dropped += len(history) - len(kept)
            history[:] = kept
        history.append(AttemptRow(**record))

    def record_ended(
        self, row: JobRow, outcome: str, finished_at: int | None, keep: int, category: str | None
    ) -> None:
        """Record that the attempt ``row``'s current lease is for ended at ``finished_at`` with
        ``outcome``, its worker the one that claimed it (host and process while its registry
        row is kept): a lost lease, as a claim taking it over records it, or a cancel."""
        worker = None if row.worker_id is None else self.workers.get(row.worker_id)
        record = {
            "job_id": row.id,
            "lease_token": row.lease_token,
            "attempt": row.attempt,
            "worker_id": row.worker_id,
            "host": None if worker is None else worker.host,
            "pid": None if worker is None else worker.pid,
            "claimed_at": row.started_at,
            "finished_at": finished_at,
            "outcome": outcome,
            "category": category,
            "error_class": None,
            "detail": None,
            "retry_at": None,
        }
        self.record(row, record, keep)

    def track(self, row: JobRow) -> None:
        """Keep the claim index in step with ``row.available_at`` after any change to it, and
        release what waits for a change of its state, as the SQL stores' triggers do."""
        if row.state != row.seen_state:
            old, row.seen_state = row.seen_state, row.state
            self._release(row, old)
        if row.available_at is None:
            self.live.get(row.queue, set()).discard(row.id)
        else:
            self.live.setdefault(row.queue, set()).add(row.id)

    def _release(self, row: JobRow, old: str) -> None:
        """What the triggers do on a change of ``row``'s state from ``old``: migration 0021's
        release of a workflow's steps (chains' and batches' included, from 0022), and 0022's
        chain rule and batch counts."""
        if row.workflow_id is not None:
            self.workflows.finished(self, row, old)
        if row.chain_next is not None and row.state == "cancelled":
            self._cancel_rest(row)
        batch = self.batches.get(row.batch_id) if row.batch_id is not None else None
        if batch is None or row.state == "pruned":
            return
        if row.state not in _END_STATES and old not in _END_STATES:
            return
        for state in _END_STATES:
            change = (row.state == state) - (old == state)
            setattr(batch, state, getattr(batch, state) + change)
        batch.updated_at = row.updated_at
        if batch.finished_at is None and batch.completed + batch.dead_letter + batch.cancelled == (
            batch.total
        ):
            batch.finished_at = row.updated_at

    def batch_outcome(self, job: JobRow) -> str | None:
        """``workflow_triggers.batch_outcome``: when ``job`` is a batch's callback, the batch's
        counts over its members, as its upstream (``None`` for any other job)."""
        batch = self.batches.get(job.workflow_id) if job.workflow_id is not None else None
        if batch is None or batch.callback_id != job.id:
            return None
        counts = dict.fromkeys(_END_STATES, 0)
        for member in self.jobs.values():
            if member.batch_id == batch.id and member.state in counts:
                counts[member.state] += 1
        found = {"batch_id": str(batch.id), "total": batch.total, **counts}
        return json.dumps({"batch": found})

    def kept_for_chain(self, row: JobRow) -> bool:
        """``removal.statements.kept_for_chain``: a dead letter whose chain's next step is
        held."""
        if row.state != "dead_letter" or row.chain_next is None:
            return False
        following = self.jobs.get(row.chain_next)
        return (
            following is not None
            and following.state == "ready"
            and (following.due_at == HELD_DUE_AT)
        )

    def _cancel_rest(self, step: JobRow) -> None:
        """A cancelled step's chain ends: its later held steps are cancelled too."""
        for row in list(self.jobs.values()):
            if row.chain_id != step.chain_id or (row.chain_step or 0) <= (step.chain_step or 0):
                continue
            if row.state != "ready" or row.due_at != HELD_DUE_AT:
                continue
            row.state = "cancelled"
            row.available_at = row.lease_expires_at = None
            row.finished_at = row.updated_at = step.updated_at
            row.lease_token += 1
            row.seen_state = row.state  # one update for them all, as the trigger's
            self.track(row)

    def live_rows(self, queue: str) -> Iterator[JobRow]:
        jobs = self.jobs
        return (jobs[job_id] for job_id in self.live.get(queue, ()))


def partition_of(row: JobRow) -> str:
    """``schema.partition``: the job's partition key, else its tenant."""
    return row.partition_key if row.partition_key is not None else row.tenant_id
