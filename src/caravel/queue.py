"""The application's entry point: enqueue jobs, read their status, replay dead letters, and (for
workers and integrations) claim, acknowledge and renew leases.

:class:`DatabaseQueue` is an internal API for your application and its workers. Take tenant ids
from the verified caller, and don't expose these methods directly to clients.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import TracebackType
from typing import Self
from uuid import UUID

import sqlalchemy as sa

from caravel.clock import Clock, SystemClock, duration_ms, from_ms
from caravel.envelope import prepare
from caravel.errors import LeaseLostError, SchemaNotReadyError, ValidationError
from caravel.jobs import (
    ClaimedJob,
    DispatchOptions,
    EnqueueResult,
    JobState,
    JobStatus,
    Lease,
    WorkerInfo,
)
from caravel.migrate import head
from caravel.options import QueueOptions
from caravel.registry import JobRegistry
from caravel.store import open_store
from caravel.store.api import (
    ClaimSource,
    FailedAttempt,
    InsertOutcome,
    JobFilter,
    NewJob,
    QueueCounts,
    Store,
    ThroughputBucket,
)
from caravel.telemetry import InstrumentedStore
from caravel.validation import check_identifier, check_queue_name, check_wire_name
from caravel.wakeup import WakeupHub

__all__ = ["DatabaseQueue", "FailureOutcome"]

#: ``enqueue_many`` prepares larger batches in chunks of this many jobs (see there).
PREPARE_CHUNK = 250


@dataclass(frozen=True, slots=True)
class FailureOutcome:
    """What a recorded failure did: the job retries at ``retry_at``, or, when ``retry_at`` is
    ``None``, it used its last attempt and is now a dead letter."""

    retry_at: datetime | None

    @property
    def dead_lettered(self) -> bool:
        return self.retry_at is None


def _job_id(value: UUID | str) -> UUID:
    if isinstance(value, UUID):
        return value
    try:
        return UUID(str(value))
    except ValueError:
        raise ValidationError("job_id", "must be a UUID") from None


class DatabaseQueue:
    """A durable queue in a PostgreSQL or SQLite database.

    ``target`` is a database URL (``postgresql://...``, ``sqlite:///queue.db``) or an already
    opened :class:`~caravel.store.api.Store`. With ``read_only=True`` the database itself refuses
    writes (SQLite opened with ``mode=ro``, PostgreSQL transactions ``READ ONLY``): use it for
    dashboards and status commands. The queue never creates its tables: apply the
    migrations first (``caravel db upgrade``). Use it as an async context manager, or call
    :meth:`close`, to release its connections.
    """

    def __init__(
        self,
        target: str | sa.URL | Store,
        registry: JobRegistry,
        *,
        options: QueueOptions | None = None,
        clock: Clock | None = None,
        read_only: bool = False,
    ) -> None:
        if not isinstance(registry, JobRegistry):
            raise ValidationError("registry", "must be a JobRegistry")
        store: Store = (
            open_store(target, read_only=read_only) if isinstance(target, str | sa.URL) else target
        )
        # Every store operation is traced and measured at this one seam.
        self.store: Store = (
            store if isinstance(store, InstrumentedStore) else InstrumentedStore(store)
        )
        self.registry = registry
        self.options = options if options is not None else QueueOptions()
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.wakeups = WakeupHub()
        self._lease_ms = duration_ms(self.options.lease_duration)
        self._lifetime_ms = duration_ms(self.options.max_lease_lifetime)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Release the database connections."""
        await self.store.close()

    async def check_schema(self) -> None:
        """Raise :class:`~caravel.errors.SchemaNotReadyError` unless the database is at the
        library's newest migration."""
        found = await self.store.schema_revision()
        newest = head()
        if found is None:
            raise SchemaNotReadyError("no queue migration has been applied")
        if found != newest:
            raise SchemaNotReadyError(f"at revision {found}, the newest is {newest}")

    # ----- enqueue -------------------------------------------------------------------------

    async def enqueue(self, job: object, dispatch: DispatchOptions) -> EnqueueResult:
        """Save one job, durably, and return its id once the row is committed.

        With an idempotency key, repeating the same queue, tenant, key, job type and payload
        returns the original job (``already_enqueued=True``), even after it finished, and changes
        nothing. The same key with different content raises
        :class:`~caravel.errors.IdempotencyConflictError`.
        """
        (result,) = await self.enqueue_many([(job, dispatch)])
        return result

    async def enqueue_many(
        self, items: Iterable[tuple[object, DispatchOptions]]
    ) -> list[EnqueueResult]:
        """Save many jobs in one transaction; results come back in the order given.

        A job that fails validation raises :class:`~caravel.errors.ValidationError` and nothing
        of the call is written. Idempotency keys are honoured per job, including between jobs
        of the same call. A conflict rolls back the whole call.
        """
        now = self.clock.now_ms()
        items = list(items)
        if len(items) <= PREPARE_CHUNK:
            prepared = [
                prepare(self.registry, self.options, job, dispatch, now) for job, dispatch in items
            ]
            return await self.insert_prepared(prepared)

        def chunks() -> Iterator[list[NewJob]]:
            for start in range(0, len(items), PREPARE_CHUNK):
                yield [
                    prepare(self.registry, self.options, job, dispatch, now)
                    for job, dispatch in items[start : start + PREPARE_CHUNK]
                ]

        # A large batch is prepared chunk by chunk, so a dialect can insert one chunk while the
        # next is validated and serialized. Still one transaction: a job that fails validation
        # rolls back every chunk before it.
        new_jobs, outcomes = await self.store.job_insert_chunks(chunks())
        return self._results(new_jobs, outcomes)

    async def insert_prepared(self, new_jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        """Insert already validated and serialized jobs (enqueue and the outbox relay share
        this path) and wake workers in this process."""
        outcomes = await self.store.job_insert_many(new_jobs)
        return self._results(new_jobs, outcomes)

    def _results(
        self, new_jobs: Sequence[NewJob], outcomes: Sequence[InsertOutcome]
    ) -> list[EnqueueResult]:
        """Wake this process's workers for the queues that got jobs; the caller's results."""
        self.wakeups.notify(
            {job.queue for job, o in zip(new_jobs, outcomes, strict=True) if o.inserted}
        )
        return [EnqueueResult(o.job_id, already_enqueued=not o.inserted) for o in outcomes]

    # ----- status and replay ---------------------------------------------------------------

    async def get_status(self, job_id: UUID | str, queue: str, tenant_id: str) -> JobStatus | None:
        """The job's status, or ``None`` when no job has this id in this queue for this exact
        tenant (matching is case-sensitive)."""
        return await self.store.job_get(
            _job_id(job_id), check_queue_name(queue), check_identifier(tenant_id, "tenant_id")
        )

    async def get_payload(self, job_id: UUID | str, queue: str, tenant_id: str) -> str | None:
        """The job's stored payload (canonical JSON text), with the same exact matching as
        :meth:`get_status`. Payloads may be private: show them only to those allowed."""
        return await self.store.job_get_payload(
            _job_id(job_id), check_queue_name(queue), check_identifier(tenant_id, "tenant_id")
        )

    async def replay(self, job_id: UUID | str, queue: str, tenant_id: str) -> bool:
        """Make a dead-lettered job run again: same id and payload, attempts reset to zero, due
        now. Returns ``False`` (and changes nothing) for any job that is not a dead letter of
        this queue and tenant. Replay repeats side effects; treat it as an administrative
        action."""
        return await self.store.job_replay(
            _job_id(job_id),
            check_queue_name(queue),
            check_identifier(tenant_id, "tenant_id"),
            self.clock.now_ms(),
        )

    async def queue_counts(self, queue: str | None = None) -> list[QueueCounts]:
        """Per-queue counts: ready (due now), delayed, running with a live lease, running with an
        expired lease, dead letters and completed. ``queue`` limits it to one queue."""
        if queue is not None:
            check_queue_name(queue)
        return await self.store.queue_counts(queue, self.clock.now_ms())

    async def list_jobs(
        self,
        *,
        queue: str | None = None,
        tenant_id: str | None = None,
        state: JobState | None = None,
        job_type: str | None = None,
        limit: int = 50,
        offset: int = 0,
        oldest_first: bool = False,
    ) -> list[JobStatus]:
        """Recent jobs, newest first (oldest first with ``oldest_first``), without payloads.
        Every given filter must match. ``offset`` skips that many matching jobs first, for
        paging (0 to 1000000)."""
        if queue is not None:
            check_queue_name(queue)
        if tenant_id is not None:
            check_identifier(tenant_id, "tenant_id")
        if job_type is not None:
            check_wire_name(job_type, "job_type")
        if state is not None and not isinstance(state, JobState):
            raise ValidationError("state", "must be a JobState")
        if isinstance(limit, bool) or not isinstance(limit, int) or not (1 <= limit <= 10_000):
            raise ValidationError("limit", "must be an integer from 1 to 10000")
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= 10**6:
            raise ValidationError("offset", "must be an integer from 0 to 1000000")
        return await self.store.job_list(
            JobFilter(
                queue=queue,
                tenant_id=tenant_id,
                state=state,
                job_type=job_type,
                limit=limit,
                offset=offset,
                oldest_first=bool(oldest_first),
            )
        )

    async def throughput(
        self,
        queue: str | None = None,
        *,
        window: timedelta = timedelta(hours=1),
        bucket: timedelta = timedelta(minutes=5),
    ) -> list[ThroughputBucket]:
        """Jobs completed and moved to dead letter per queue, in ``bucket``-long buckets over
        the last ``window``, read from the jobs' finish times.

        Buckets are aligned to multiples of ``bucket`` since the epoch; the last one is the
        bucket the current time falls in (still filling). Every queue that finished a job in
        the window gets every bucket, oldest first, zeros included. Jobs deleted or replayed
        since they finished no longer count. ``bucket`` is at least one second, ``window`` at
        least one bucket and at most 1000 buckets.
        """
        if queue is not None:
            check_queue_name(queue)
        bucket_ms = duration_ms(bucket)
        if bucket_ms < 1000:
            raise ValidationError("bucket", "must be at least one second")
        count = -(-duration_ms(window) // bucket_ms)
        if not (1 <= count <= 1000):
            raise ValidationError("window", "must span from 1 to 1000 buckets")
        now = self.clock.now_ms()
        last = now - now % bucket_ms
        since = last - (count - 1) * bucket_ms
        found = await self.store.job_throughput(queue, since, last + bucket_ms, bucket_ms)
        by_key = {(b.queue, b.start): b for b in found}
        queues = sorted({b.queue for b in found} | ({queue} if queue is not None else set()))
        return [
            by_key.get((name, start), ThroughputBucket(name, start, 0, 0))
            for name in queues
            for start in range(since, last + bucket_ms, bucket_ms)
        ]

    async def list_workers(
        self,
        *,
        lost_after: timedelta = timedelta(seconds=60),
        window: timedelta = timedelta(hours=24),
    ) -> list[WorkerInfo]:
        """Worker processes seen within ``window``, newest first. One whose heartbeat is older
        than ``lost_after`` without a normal shutdown is reported as ``lost``."""
        now = self.clock.now_ms()
        lost_ms = duration_ms(lost_after)
        records = await self.store.worker_list(now - duration_ms(window))
        return [
            WorkerInfo(
                worker_id=r.id,
                host=r.host,
                pid=r.pid,
                queues=r.queues,
                concurrency=r.concurrency,
                started_at=from_ms(r.started_at),
                heartbeat_at=from_ms(r.heartbeat_at),
                in_flight=r.in_flight if r.stopped_at is None else 0,
                state=(
                    "stopped"
                    if r.stopped_at is not None
                    else "lost"
                    if now - r.heartbeat_at > lost_ms
                    else "running"
                ),
            )
            for r in records
        ]

    # ----- leases (workers and integrations) -----------------------------------------------

    async def claim_many(
        self, queue: str, limit: int, *, source: ClaimSource = "any"
    ) -> list[ClaimedJob]:
        """Lease up to ``limit`` due jobs of ``queue``. Each claim counts as an attempt.

        ``source`` narrows what is taken: ``"ready"`` only waiting jobs, ``"expired"`` only
        running jobs whose lease ran out (taking over a crashed worker's job), ``"any"`` (the
        default) both, oldest first.
        """
        check_queue_name(queue)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValidationError("limit", "must be a positive integer")
        if source not in ("any", "ready", "expired"):
            raise ValidationError("source", "must be 'any', 'ready' or 'expired'")
        while True:
            batch = await self.store.job_claim_many(
                queue, limit, self.clock.now_ms(), self._lease_ms, source
            )
            # Jobs dead-lettered on the way (their last lease expired) use up the limit without
            # giving work; look again so a caller never sees "nothing due" while jobs wait.
            if batch.claimed or batch.dead_lettered == 0:
                return batch.claimed

    async def claim(self, queue: str) -> ClaimedJob | None:
        """Lease the next due job of ``queue``, or return ``None`` when none is due."""
        claimed = await self.claim_many(queue, 1)
        return claimed[0] if claimed else None

    async def complete(self, lease: Lease) -> None:
        """Record success. Raises :class:`~caravel.errors.LeaseLostError`, changing nothing,
        when the lease is no longer current."""
        done = await self.store.job_complete_many([lease], self.clock.now_ms())
        if lease.job_id not in done:
            raise LeaseLostError(lease.job_id)

    def failure_for(self, lease: Lease, category: str, now: int) -> FailedAttempt:
        """The failed attempt to record: a retry after the backoff for this attempt, or a dead
        letter when the attempt was the last."""
        if lease.attempt >= lease.max_attempts:
            return FailedAttempt(lease, category, retry_at=None)
        backoff = duration_ms(self.options.retry_backoff(lease.attempt))
        return FailedAttempt(lease, category, retry_at=now + backoff)

    async def fail(self, lease: Lease, category: str) -> FailureOutcome:
        """Record a failed attempt under a short category (never an exception message).

        Raises :class:`~caravel.errors.LeaseLostError`, changing nothing, when the lease is no
        longer current.
        """
        now = self.clock.now_ms()
        failure = self.failure_for(lease, category, now)
        done = await self.store.job_fail_many([failure], now)
        if lease.job_id not in done:
            raise LeaseLostError(lease.job_id)
        return FailureOutcome(None if failure.retry_at is None else from_ms(failure.retry_at))

    async def renew(self, lease: Lease) -> Lease | None:
        """Extend a current, unexpired lease by the lease duration (never past the maximum
        lease lifetime, counted from the claim). Returns the new lease to keep, or ``None`` when
        renewal was rejected: the lease expired, was superseded, the job finished, or the
        lifetime is used up. A renewal is not an attempt."""
        now = self.clock.now_ms()
        expires = min(now + self._lease_ms, self.lifetime_end_ms(lease))
        if expires <= now:
            return None
        return await self.store.job_renew_lease(lease, now, expires)

    def lifetime_end_ms(self, lease: Lease) -> int:
        """When the claim behind ``lease`` reaches the maximum lease lifetime."""
        return lease.claimed_at_ms + self._lifetime_ms

    def lease_deadline_ms(self, lease: Lease) -> int:
        """The latest moment the holder of ``lease`` may keep working on it."""
        return min(lease.expires_at_ms, self.lifetime_end_ms(lease))
