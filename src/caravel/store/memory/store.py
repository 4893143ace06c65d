"""The in-memory store's writes: :class:`MemoryStore`, the whole store protocol over plain
Python rows. Every operation follows the shared SQL statements (:mod:`caravel.store.queries`)
column for column, so it passes the same conformance suite as PostgreSQL and SQLite.

It is not durable and belongs to one process: nothing reaches a disk, and the jobs are lost when
the process exits. It suits tests and local development, not production.
"""

from __future__ import annotations

import heapq
from asyncio import AbstractEventLoop
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from uuid import UUID

from caravel.attempts import AttemptOutcome
from caravel.errors import StoreError, ValidationError
from caravel.jobs import FailureCategory, JobState, Lease
from caravel.store import attempts
from caravel.store.claims import nonces
from caravel.store.memory.inserts import insert_all
from caravel.store.memory.limits import MemoryLimits, claim_clock, limited_pick, log_starts
from caravel.store.memory.pending import give_up_taken_key
from caravel.store.memory.pruning import prune
from caravel.store.memory.removal import MemoryRemoval
from caravel.store.memory.schedules import MemorySchedules
from caravel.store.memory.tables import JobRow, Tables, WorkerRow
from caravel.store.memory.workflows import MemoryWorkflows
from caravel.store.protocol import (
    ClaimBatch,
    ClaimRequest,
    ClaimSource,
    Committed,
    FailedAttempt,
    Heartbeat,
    InsertResult,
    JobRef,
    NewJob,
    ProgressUpdate,
    Recorder,
    SnoozedAttempt,
    WorkerRecord,
)
from caravel.store.pruning import PruneBatch, PruneRequest
from caravel.store.rows import CLAIM_RETURNING, claimed_from_rows, worker_row
from caravel.store.schema import claim_rank_of
from caravel.store.workflows.records import NewWorkflow

__all__ = ["MemoryStore"]


def _no_session() -> ValidationError:
    return ValidationError(
        "session",
        "a memory:// queue has no database to share a transaction with; enqueue without "
        "session= (or use a SQLite or PostgreSQL queue)",
    )


def _no_transaction() -> ValidationError:
    return ValidationError(
        "session",
        "a memory:// queue has no database to share a transaction with; complete the job by "
        "returning from its handler (or use a SQLite, PostgreSQL or MariaDB queue)",
    )


READY = JobState.READY.value
RUNNING = JobState.RUNNING.value
COMPLETED = JobState.COMPLETED.value
DEAD = JobState.DEAD_LETTER.value
PRUNED = JobState.PRUNED.value

#: Who records outcomes when the caller does not say (as ``SqlStore``'s).
NOBODY = Recorder()

#: The attribute names a claim returns, in :data:`~caravel.store.rows.CLAIM_RETURNING` order.
_CLAIM_FIELDS = tuple(column.name for column in CLAIM_RETURNING)
_Order = Callable[[JobRow], tuple[int, int]]
_READY_ORDER: tuple[str, _Order] = (
    READY,
    lambda row: (claim_rank_of(row.due_at, row.priority), row.rowid),
)
_EXPIRED_ORDER: tuple[str, _Order] = (RUNNING, lambda row: (row.available_at or 0, row.rowid))
#: The state each claim source reads (rows with ``available_at`` set only, as in SQL) and the
#: order it takes them in, as :mod:`caravel.store.claims` does.
_SOURCES: dict[ClaimSource, tuple[tuple[str, _Order], ...]] = {
    "any": (_EXPIRED_ORDER, _READY_ORDER),
    "ready": (_READY_ORDER,),
    "expired": (_EXPIRED_ORDER,),
}


class MemoryStore(MemoryRemoval, MemorySchedules, MemoryLimits, MemoryWorkflows):
    """Every queue operation over one in-memory queue's tables, each atomic under their lock.
    Not durable, and per process (see the module docstring). Wake-ups within the process go
    through the queue's own hub, so :meth:`wakeups` has nothing to push."""

    # ----- enqueue -------------------------------------------------------------------------

    async def job_insert_many(
        self, chunks: Iterable[Sequence[NewJob]], *, total: int
    ) -> InsertResult:
        # Every chunk is drawn before anything changes: an error while drawing leaves no trace.
        new_jobs = [job for chunk in chunks for job in chunk]
        with self._locked("job_insert") as tables:
            return insert_all(tables, new_jobs)

    def job_insert_blocking(self, new_job: NewJob, loop: AbstractEventLoop) -> InsertResult:
        # Atomic under the tables' lock on any thread: nothing to hand to the loop.
        with self._locked("job_insert") as tables:
            return insert_all(tables, [new_job])

    # ----- claim and acknowledge -----------------------------------------------------------

    async def job_claim_many(self, request: ClaimRequest) -> ClaimBatch:
        now, limit, queue = request.now, request.limit, request.queue
        with self._locked("job_claim") as tables:
            # Leases are judged by the claim's own clock; a rated claim's starts and leases run
            # from its window clock (``limited.claim``).
            at = claim_clock(tables, queue, now) if request.limited else now
            nonce = nonces.draw()

            def due(state: str) -> list[JobRow]:
                return [
                    row
                    for row in tables.live_rows(queue)
                    if row.state == state and row.available_at is not None
                    and row.available_at <= now
                ]  # fmt: skip

            sources = _SOURCES[request.source]
            if request.limited:
                picked = limited_pick(tables, queue, now, limit, sources, due, window=at)
            else:
                picked = []
                # "any" as in SQL: up to the batch of each source, expired leases first; none
                # while the queue has limits (``claims.claim``).
                for state, order in sources if queue not in tables.limits else ():
                    picked.extend(heapq.nsmallest(limit, due(state), key=order))
            returned = []
            for row in picked[:limit]:
                if row.state == RUNNING:  # its lease expired: that attempt ended there
                    tables.record_ended(
                        row,
                        AttemptOutcome.LEASE_EXPIRED.value,
                        row.lease_expires_at,
                        request.attempt_history,
                        FailureCategory.LEASE_EXPIRED.value,
                    )
                _claim(row, at, at + request.lease_ms, request.worker_id, nonce)
                tables.track(row)
                returned.append(tuple(getattr(row, name) for name in _CLAIM_FIELDS))
            if request.limited:
                log_starts(tables, queue, at, picked[:limit])
        return claimed_from_rows(returned)

    async def job_complete_many(
        self,
        leases: Sequence[Lease],
        now: int,
        *,
        durable: bool = False,
        results: Mapping[UUID, str] | None = None,
        recorder: Recorder | None = None,
    ) -> set[UUID]:
        by = recorder or NOBODY
        done: set[UUID] = set()
        with self._locked("job_complete") as tables:
            for lease in leases:
                row = _held(tables, lease)
                if row is None:
                    continue
                text = None if results is None else results.get(lease.job_id)
                if text is not None:
                    row.result = text
                row.state = COMPLETED
                row.available_at = row.lease_expires_at = None
                row.finished_at = row.updated_at = now
                tables.record(
                    row,
                    attempts.record(lease, by, now, AttemptOutcome.COMPLETED),
                    by.attempt_history,
                )
                tables.track(row)
                done.add(row.id)
        return done

    async def job_fail_many(
        self,
        failures: Sequence[FailedAttempt],
        now: int,
        *,
        durable: bool = False,
        recorder: Recorder | None = None,
    ) -> set[UUID]:
        by = recorder or NOBODY
        done: set[UUID] = set()
        with self._locked("job_fail") as tables:
            for failure in failures:
                row = _held(tables, failure.lease)
                if row is None:
                    continue
                retry_at = failure.retry_at
                row.state = READY if retry_at is not None else DEAD
                if retry_at is not None:
                    give_up_taken_key(tables, row)
                    row.due_at = retry_at
                row.available_at = retry_at
                row.lease_expires_at = None
                row.finished_at = None if retry_at is not None else now
                row.last_failure = failure.category
                if failure.error_class is not None:
                    row.error_class = failure.error_class
                row.updated_at = now
                record = attempts.record(
                    failure.lease,
                    by,
                    now,
                    failure.outcome,
                    category=failure.category,
                    error_class=failure.error_class,
                    detail=failure.detail,
                    retry_at=retry_at,
                )
                tables.record(row, record, by.attempt_history)
                tables.track(row)
                done.add(row.id)
        return done

    async def job_snooze_many(
        self,
        snoozes: Sequence[SnoozedAttempt],
        now: int,
        *,
        durable: bool = False,
        recorder: Recorder | None = None,
    ) -> set[UUID]:
        by = recorder or NOBODY
        done: set[UUID] = set()
        with self._locked("job_snooze") as tables:
            for snoozed in snoozes:
                row = _held(tables, snoozed.lease)
                if row is None:
                    continue
                give_up_taken_key(tables, row)
                row.state = READY
                row.attempt -= 1
                row.snoozes += 1
                row.due_at = row.available_at = snoozed.until
                row.lease_expires_at = None
                row.updated_at = now
                record = attempts.record(
                    snoozed.lease, by, now, AttemptOutcome.SNOOZED, retry_at=snoozed.until
                )
                tables.record(row, record, by.attempt_history)
                tables.track(row)
                done.add(row.id)
        return done

    async def job_renew_lease(self, lease: Lease, now: int, expires_at: int) -> Lease | None:
        with self._locked("job_renew_lease") as tables:
            row = _held(tables, lease)
            if row is None or row.lease_expires_at is None or row.lease_expires_at <= now:
                return None
            row.lease_expires_at = row.available_at = expires_at
            row.updated_at = now
            tables.track(row)
        return replace(lease, expires_at_ms=expires_at)

    async def job_set_progress(self, update: ProgressUpdate) -> bool:
        if update.progress is None and update.meta is None:
            return False
        with self._locked("job_set_progress") as tables:
            row = _held(tables, update.lease)
            if row is None:
                return False
            if update.progress is not None:
                row.progress = update.progress
                row.progress_at = update.now
            if update.meta is not None:
                row.meta = update.meta
        return True

    # ----- replay --------------------------------------------------------------------------

    async def job_replay(self, ref: JobRef, now: int) -> bool:
        with self._locked("job_replay") as tables:
            row = self._owned(tables, ref)
            if row is None or row.state != DEAD:
                return False
            give_up_taken_key(tables, row)
            row.state = READY
            row.attempt = 0
            row.due_at = row.available_at = row.updated_at = now
            row.lease_expires_at = row.started_at = row.finished_at = None
            row.last_failure = row.error_class = None
            row.snoozes = 0
            tables.track(row)
        return True

    # ----- retention -----------------------------------------------------------------------

    async def job_prune(self, request: PruneRequest) -> PruneBatch:
        with self._locked("job_prune") as tables:
            return prune(tables, request)

    # ----- pausing queues (queue_pause, queue_resume in caravel.store.pausing) --------------

    async def queue_pause(self, queue: str, now: int) -> bool:
        with self._locked("queue_pause") as tables:
            if queue in tables.paused:
                return False
            tables.paused[queue] = now
        return True

    async def queue_resume(self, queue: str, now: int) -> bool:
        with self._locked("queue_resume") as tables:
            return tables.paused.pop(queue, None) is not None

    def queue_changes(self, queues: Sequence[str]) -> AsyncIterator[str] | None:
        return None

    # ----- worker registry ------------------------------------------------------------------

    async def worker_register(self, worker: WorkerRecord) -> None:
        with self._locked("worker_register") as tables:
            if worker.id in tables.workers:
                raise StoreError("worker_register", "a worker with this id is registered")
            tables.workers[worker.id] = WorkerRow(**worker_row(worker))

    async def worker_heartbeat(self, beat: Heartbeat) -> None:
        with self._locked("worker_heartbeat") as tables:
            row = tables.workers.get(beat.worker_id)
            if row is None:
                return  # as an UPDATE that matches no row
            row.heartbeat_at = beat.now
            row.in_flight = beat.in_flight
            if beat.stopped:
                row.stopped_at = beat.now

    def wakeups(self, queues: Sequence[str]) -> AsyncIterator[str] | None:
        return None

    # ----- a caller's transaction: there is none to join ------------------------------------

    async def database_identity(self) -> str:
        return f"memory:{id(self._tables)}"

    async def job_insert_joined(
        self, target: object, new_jobs: Sequence[NewJob], *, on_commit: Committed = None
    ) -> InsertResult:
        raise _no_session()

    def job_insert_joined_sync(
        self,
        target: object,
        new_jobs: Sequence[NewJob],
        identity: str,
        *,
        on_commit: Committed = None,
    ) -> InsertResult:
        raise _no_session()

    async def job_complete_joined(
        self,
        target: object,
        lease: Lease,
        now: int,
        *,
        result: str | None = None,
        recorder: Recorder | None = None,
    ) -> bool:
        raise _no_transaction()

    def job_complete_joined_sync(
        self,
        target: object,
        lease: Lease,
        now: int,
        identity: str,
        *,
        result: str | None = None,
        recorder: Recorder | None = None,
    ) -> bool:
        raise _no_transaction()

    async def job_completed_under(self, lease: Lease) -> bool:
        row = self._tables.jobs.get(lease.job_id)
        return (
            row is not None
            and row.state == JobState.COMPLETED.value
            and (row.lease_token, row.lease_nonce) == (lease.token, lease.nonce)
        )

    async def workflow_insert_joined(
        self, target: object, workflow: NewWorkflow, *, on_commit: Committed = None
    ) -> tuple[UUID, bool]:
        raise _no_session()

    def workflow_insert_joined_sync(
        self,
        target: object,
        workflow: NewWorkflow,
        identity: str,
        *,
        on_commit: Committed = None,
    ) -> tuple[UUID, bool]:
        raise _no_session()


def _held(tables: Tables, lease: Lease) -> JobRow | None:
    """The running job ``lease`` still holds (same id, same token, same nonce), if any."""
    row = tables.jobs.get(lease.job_id)
    if row is None or row.state != RUNNING:
        return None
    if row.lease_token != lease.token or row.lease_nonce != lease.nonce:
        return None
    return row


def _claim(row: JobRow, now: int, expires: int, worker_id: UUID | None, nonce: int) -> None:
    """What one claim does to a picked row: lease it to ``worker_id`` under the claim's
    ``nonce``, or dead-letter it when its expired lease was its last attempt
    (``claims.claim``'s two branches)."""
    row.lease_token += 1
    row.updated_at = now
    if row.state == RUNNING and row.attempt >= row.max_attempts:
        row.state = DEAD
        row.lease_expires_at = row.available_at = None
        row.finished_at = now
        row.last_failure = FailureCategory.LEASE_EXPIRED.value
        return
    row.state = RUNNING
    row.attempt += 1
    row.lease_expires_at = row.available_at = expires
    row.started_at = now
    row.finished_at = None
    row.worker_id = worker_id
    row.lease_nonce = nonce
