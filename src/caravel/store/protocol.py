"""The database seam: the one interface through which Caravel reads and writes the queue.

Operations are named noun first (``job_insert_many``, ``job_claim_many``...), take typed
parameters and return typed rows. Nothing above this seam builds SQL. Each dialect module
implements it and declares what it can do through capability flags
(``supports_listen_notify``), so callers never ask which database they are on.

All times are whole milliseconds since the epoch, supplied by the caller's clock: the store never
reads the database server's clock, so an injected test clock controls every lease and retry. The
parameters and rows are in :mod:`caravel.store.values`, and are importable from here too.
"""

from __future__ import annotations

from asyncio import AbstractEventLoop
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Protocol
from uuid import UUID

from caravel.attempts import AttemptRecord
from caravel.flow.concurrency import ConcurrencyLimit
from caravel.flow.rate import RateLimit
from caravel.jobs import JobStatus, Lease
from caravel.store.limit_values import KeyUsage, LimitKind, QueueLimit, QueueLimitUsage
from caravel.store.links import LinkReads, LinkWrites
from caravel.store.pruning import PruneBatch, PruneRequest
from caravel.store.removal import RemovalStore
from caravel.store.values import (
    SHOWN_STATES,
    AllInserted,
    ClaimBatch,
    ClaimRequest,
    ClaimSource,
    Committed,
    FailedAttempt,
    Heartbeat,
    InsertOutcome,
    InsertResult,
    JobFilter,
    JobRef,
    NewJob,
    PausedQueue,
    ProgressUpdate,
    QueueCounts,
    QueueSignal,
    Recorder,
    ScheduleState,
    ShownState,
    SignalQuery,
    SnoozedAttempt,
    ThroughputBucket,
    ThroughputQuery,
    WorkerRecord,
    shown_state,
)
from caravel.store.workflows.records import WorkflowReads, WorkflowWrites

__all__ = [
    "SHOWN_STATES",
    "AllInserted",
    "ClaimBatch",
    "ClaimRequest",
    "ClaimSource",
    "Committed",
    "FailedAttempt",
    "Heartbeat",
    "InsertOutcome",
    "InsertResult",
    "JobFilter",
    "JobRef",
    "KeyUsage",
    "LimitKind",
    "NewJob",
    "PausedQueue",
    "ProgressUpdate",
    "QueueCounts",
    "QueueLimit",
    "QueueLimitUsage",
    "QueueSignal",
    "ReadStore",
    "Recorder",
    "ScheduleState",
    "ShownState",
    "SignalQuery",
    "SnoozedAttempt",
    "Store",
    "ThroughputBucket",
    "ThroughputQuery",
    "WorkerRecord",
    "shown_state",
]


class ReadStore(LinkReads, WorkflowReads, Protocol):
    """The operations that only read: what operators look at. A store opened for reading
    (:func:`~caravel.store.open_reader`) offers only these, on a connection the database itself
    keeps read-only."""

    #: The OpenTelemetry ``db.system.name`` of the database ("postgresql", "sqlite").
    db_system: str

    async def job_get(self, ref: JobRef) -> JobStatus | None:
        """A job's status when id, queue and tenant all match exactly."""
        ...

    async def job_get_payload(self, ref: JobRef) -> str | None:
        """A job's stored payload text when id, queue and tenant all match exactly."""
        ...

    async def job_attempts(self, ref: JobRef) -> list[AttemptRecord] | None:
        """The attempt records a job keeps (see :class:`Recorder`), oldest first, when id,
        queue and tenant all match exactly; ``None`` when no such job exists."""
        ...

    async def job_get_result(self, ref: JobRef) -> str | None:
        """A job's stored result (JSON text) when id, queue and tenant all match exactly;
        ``None`` when there is no such job or it stored no result."""
        ...

    async def job_list(self, where: JobFilter) -> list[JobStatus]:
        """Recent jobs, newest first, without payloads."""
        ...

    async def job_list_with_last_attempt(
        self, where: JobFilter
    ) -> list[tuple[JobStatus, AttemptRecord | None]]:
        """What :meth:`job_list` returns, each job with its latest attempt record (its newest
        claim's; ``None`` when it keeps none), read together in one statement."""
        ...

    async def queue_counts(self, queue: str | None, now: int) -> list[QueueCounts]:
        """Per-queue counts at ``now``."""
        ...

    async def queue_signal(self, query: SignalQuery) -> list[QueueSignal]:
        """What an autoscaler reads of every queue (or only ``query.queue``) with a live job,
        a job finished in the query's window, or a worker heard from in it, by name: one
        statement over the jobs table and one over the workers table, in one read."""
        ...

    async def job_throughput(self, query: ThroughputQuery) -> list[ThroughputBucket]:
        """Finished jobs (completed or dead-lettered) per queue and bucket. Only buckets with at
        least one job are returned, ordered by queue and start."""
        ...

    async def worker_list(self, since: int) -> list[WorkerRecord]:
        """Workers whose last heartbeat is at or after ``since``, newest first."""
        ...

    async def queue_list_paused(self) -> list[PausedQueue]:
        """Every paused queue, by name. A queue never paused, or resumed since, is absent."""
        ...

    async def queue_limit_list(self) -> list[QueueLimit]:
        """Every queue with a concurrency or rate limit, by name."""
        ...

    async def queue_limit_usage(
        self, queue: str | None, now: int, *, keys: int = 20
    ) -> list[QueueLimitUsage]:
        """How every limited queue (or only ``queue``: nothing when it has no limit) stands
        against its limits at ``now``, by name, with at most ``keys`` partition keys each (0
        to 1,000; see :class:`~caravel.store.values.QueueLimitUsage`). Raises
        :class:`~caravel.errors.ValidationError` naming ``queue`` or ``keys``."""
        ...

    async def schedule_list(self) -> list[ScheduleState]:
        """Every schedule the database has a row for (one that handled a slot or was ever
        paused), by name."""
        ...

    async def schema_revision(self) -> str | None:
        """The applied migration revision, or ``None`` when the queue was never migrated."""
        ...

    async def close(self) -> None:
        """Release connections. Closing again does nothing."""
        ...


class Store(ReadStore, RemovalStore, LinkWrites, WorkflowWrites, Protocol):
    """Every queue operation on one database."""

    #: Whether :meth:`wakeups` pushes enqueues from other processes (PostgreSQL's NOTIFY, the
    #: wake-up sockets beside a SQLite file).
    supports_listen_notify: bool

    async def job_insert_many(
        self, chunks: Iterable[Sequence[NewJob]], *, total: int
    ) -> InsertResult:
        """Insert ``total`` jobs, drawn chunk by chunk from ``chunks`` (the caller validates and
        serializes each chunk as it is drawn), in one transaction: an exception raised while
        drawing rolls back every chunk before it. A dialect may insert one chunk while the next
        is drawn, and picks how to insert by ``total``.

        A job whose (queue, tenant, key) or id already exists is not inserted: with the same
        job type and payload its outcome names the existing job; with different content the
        whole transaction rolls back and :class:`~caravel.errors.IdempotencyConflictError` is
        raised. A job with a pending key is settled against the job pending (ready) under its
        queue, tenant and key, in the call's order: that job is returned (``debounce_ms`` is
        ``None``) or takes the job's payload, trace context and due time, capped at its own
        creation plus ``debounce_ms`` (``replaced``); a pending job of another type rolls the
        transaction back with :class:`~caravel.errors.PendingKeyConflictError`."""
        ...

    def job_insert_blocking(self, new_job: NewJob, loop: AbstractEventLoop) -> InsertResult:
        """:meth:`job_insert_many` of one job, called from a thread other than ``loop``'s (the
        event loop the store's async operations run on), blocking it until the job is
        committed: the sync facade's one-job enqueue. A store may run the insert on the calling
        thread, and hands to ``loop`` whatever it does not settle there (a job that met an
        existing row, or one with a pending key)."""
        ...

    async def job_claim_many(self, request: ClaimRequest) -> ClaimBatch:
        """Lease jobs as ``request`` says. Each claimed job's attempt goes up by one and its
        lease token changes. A job whose lease expired with its attempts used up is
        dead-lettered (``LeaseExpired``) instead.

        A ``limited`` request keeps the queue's stored limits exactly, whatever other claims run
        at once: after it, at most ``concurrency`` of the queue's jobs are running with a lease
        unexpired at ``now``, and at most ``per_key`` per partition key (a job already over a
        lowered limit is not touched; the claim takes none until the count is below it)."""
        ...

    async def job_complete_many(
        self,
        leases: Sequence[Lease],
        now: int,
        *,
        durable: bool = False,
        results: Mapping[UUID, str] | None = None,
        recorder: Recorder | None = None,
    ) -> set[UUID]:
        """Mark jobs completed; returns the ids whose lease was still current. Others are
        untouched. Unless ``durable``, the commit may return before it reaches the disk (see
        :attr:`~caravel.WorkerOptions.durable_acks`). ``results`` holds the handlers' results
        as JSON text by job id (already bounded by the caller); a job without one stores
        none. Each job whose lease was current gets its attempt's record (``completed``), by
        ``recorder`` (see :class:`Recorder`; ``None``: an unknown worker, the default bound),
        in the same transaction."""
        ...

    async def job_snooze_many(
        self,
        snoozes: Sequence[SnoozedAttempt],
        now: int,
        *,
        durable: bool = False,
        recorder: Recorder | None = None,
    ) -> set[UUID]:
        """Make snoozed jobs ready again at their ``until`` with the attempt given back
        (``attempt - 1``) and ``snoozes`` counted up; returns the ids whose lease was still
        current. ``durable`` and ``recorder`` (the record: ``snoozed``, its ``retry_at`` the
        ``until``) as for :meth:`job_complete_many`."""
        ...

    async def job_fail_many(
        self,
        failures: Sequence[FailedAttempt],
        now: int,
        *,
        durable: bool = False,
        recorder: Recorder | None = None,
    ) -> set[UUID]:
        """Record failed attempts; returns the ids whose lease was still current. ``durable``
        and ``recorder`` (the record: the failure's ``outcome``, category, class, detail and
        retry time) as for :meth:`job_complete_many`."""
        ...

    async def job_renew_lease(self, lease: Lease, now: int, expires_at: int) -> Lease | None:
        """Extend an unexpired, current lease to ``expires_at``; ``None`` when rejected."""
        ...

    async def job_set_progress(self, update: ProgressUpdate) -> bool:
        """Store what a running handler reported (its progress, its metadata or both) while
        ``update.lease`` is the job's current lease, as its acknowledgement would be; false,
        changing nothing, once another claim took the job over or it finished."""
        ...

    async def job_replay(self, ref: JobRef, now: int) -> bool:
        """Make a dead-lettered job ready again with its attempts reset."""
        ...

    async def job_prune(self, request: PruneRequest) -> PruneBatch:
        """One bounded prune batch in its own short transaction; live jobs are never touched."""
        ...

    async def queue_pause(self, queue: str, now: int) -> bool:
        """Pause ``queue`` for every worker; false (``paused_at`` kept) if it was paused."""
        ...

    async def queue_resume(self, queue: str, now: int) -> bool:
        """Let workers claim ``queue`` again; false when it was not paused."""
        ...

    async def queue_limit_set(self, limit: ConcurrencyLimit | RateLimit, now: int) -> QueueLimit:
        """Store ``limit`` as its queue's concurrency limits or as its rates, replacing those of
        the same kind (a cap it leaves ``None`` is removed) and keeping the other kind; returns
        what the queue has stored now. Raises :class:`~caravel.errors.ValidationError` for a
        limit that breaks its class's rules, or a rate below the weight of a job waiting in the
        queue, storing nothing."""
        ...

    async def queue_limit_clear(self, queue: str, now: int, kind: LimitKind = "all") -> bool:
        """Remove ``queue``'s limits of ``kind`` (``"concurrency"``, ``"rate"`` or ``"all"``):
        its jobs are claimed without them from the next claim. False when it had none."""
        ...

    async def schedule_advance(self, name: str, slot_at: int, now: int) -> bool:
        """Record that ``name``'s slots up to ``slot_at`` are handled; false (nothing changes)
        when a slot at or after it was recorded already, so racing schedulers never move it
        back."""
        ...

    async def schedule_pause(self, name: str, now: int) -> bool:
        """Pause schedule ``name`` for every scheduler; false (``paused_at`` kept) if it was
        paused."""
        ...

    async def schedule_resume(self, name: str, now: int) -> bool:
        """Let schedulers enqueue ``name``'s slots again; false when it was not paused."""
        ...

    def queue_changes(self, queues: Sequence[str]) -> AsyncIterator[str] | None:
        """Names among ``queues`` as their pauses and resumes commit, where the database can
        push them (PostgreSQL's NOTIFY); ``None`` where workers poll instead."""
        ...

    async def worker_register(self, worker: WorkerRecord) -> None:
        """Record a starting worker process."""
        ...

    async def worker_heartbeat(self, beat: Heartbeat) -> None:
        """Say the worker is alive (or that it shut down normally)."""
        ...

    def wakeups(self, queues: Sequence[str]) -> AsyncIterator[str] | None:
        """Queue names as enqueues announce them, where the database can push them."""
        ...

    async def database_identity(self) -> str:
        """What names the store's database (its server and database, or its file): a caller's
        connection on the same database reads the same."""
        ...

    async def job_insert_joined(
        self, target: object, new_jobs: Sequence[NewJob], *, on_commit: Committed = None
    ) -> InsertResult:
        """Insert ``new_jobs`` in the transaction that ``target``, the caller's session or
        connection, has open, with the rules of :meth:`job_insert_many`; nothing is committed.
        Raises :class:`~caravel.errors.ValidationError` (field ``session``) when ``target`` is
        not on this store's database. ``on_commit`` runs once that transaction commits (where
        ``target`` can say so), with the queues that got jobs due now."""
        ...

    def job_insert_joined_sync(
        self,
        target: object,
        new_jobs: Sequence[NewJob],
        identity: str,
        *,
        on_commit: Committed = None,
    ) -> InsertResult:
        """:meth:`job_insert_joined` on a blocking session or connection, given the
        :meth:`database_identity` read before."""
        ...

    async def job_complete_joined(
        self,
        target: object,
        lease: Lease,
        now: int,
        *,
        result: str | None = None,
        recorder: Recorder | None = None,
    ) -> bool:
        """Complete the job ``lease`` holds in the transaction that ``target``, the caller's
        session or connection, has open, as :meth:`job_complete_many` completes it (the same
        fence, result and attempt record; releases of chain steps and batch callbacks in the
        same transaction); whether the lease was current. Nothing is committed, and the
        statement leaves the commit's durability to the caller's transaction. Raises
        :class:`~caravel.errors.ValidationError` (field ``session``) when ``target`` is not on
        this store's database (a memory store has none)."""
        ...

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
        """:meth:`job_complete_joined` on a blocking session or connection, given the
        :meth:`database_identity` read before."""
        ...

    async def job_completed_under(self, lease: Lease) -> bool:
        """Whether the job is completed under ``lease`` (its token and nonce): a completion
        made in a caller's transaction (:meth:`job_complete_joined`) that committed."""
        ...
