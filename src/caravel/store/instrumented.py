"""The instrumented store: every store operation traced and measured in this one place.

:func:`~caravel.store.open_store` always returns one, wrapped around the dialect's store, so no
operation can run without its span and metrics (as Oban's engine wraps every callback). The
spans and instruments themselves live in :mod:`caravel.telemetry`; this module turns each
operation's parameters and result into the plain values they take.
"""

from __future__ import annotations

import itertools
import operator
from asyncio import AbstractEventLoop
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from uuid import UUID

from caravel import telemetry
from caravel.attempts import AttemptRecord
from caravel.flow.concurrency import ConcurrencyLimit
from caravel.flow.rate import RateLimit
from caravel.jobs import CancelOutcome, FailureCategory, JobState, JobStatus, Lease
from caravel.store.links import BatchRecord, LinkedJob, NewBatch
from caravel.store.protocol import (
    AllInserted,
    ClaimBatch,
    ClaimRequest,
    Committed,
    FailedAttempt,
    Heartbeat,
    InsertResult,
    JobFilter,
    JobRef,
    LimitKind,
    NewJob,
    PausedQueue,
    ProgressUpdate,
    QueueCounts,
    QueueLimit,
    QueueLimitUsage,
    QueueSignal,
    Recorder,
    ScheduleState,
    SignalQuery,
    SnoozedAttempt,
    Store,
    ThroughputBucket,
    ThroughputQuery,
    WorkerRecord,
)
from caravel.store.pruning import PruneBatch, PruneRequest
from caravel.store.removal import JobSelection
from caravel.store.workflows.instrumented import InstrumentedWorkflows

__all__ = ["InstrumentedStore", "instrumented"]


def instrumented(store: Store) -> InstrumentedStore:
    """``store`` with telemetry around every operation (itself when it already has it)."""
    return store if isinstance(store, InstrumentedStore) else InstrumentedStore(store)


class InstrumentedStore(InstrumentedWorkflows):
    """Wraps a :class:`~caravel.store.protocol.Store`: a client span per operation, and the
    metrics that follow from each operation's result. ``inner`` is the wrapped store."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.supports_listen_notify = inner.supports_listen_notify
        self.db_system = inner.db_system

    def _span(self, operation: str) -> AbstractContextManager[telemetry.Span]:
        return telemetry.store_span(self.db_system, operation)

    async def job_insert_many(
        self, chunks: Iterable[Sequence[NewJob]], *, total: int
    ) -> InsertResult:
        if not telemetry.tracing():  # the one-job enqueue's hot path: no spans to open or carry
            result = await self.inner.job_insert_many(chunks, total=total)
            _count_enqueued(result)
            return result
        drawn = iter(chunks)
        first = next(drawn, None)
        if first is None:
            return InsertResult([], [])
        with telemetry.enqueue_span(first[0].queue if first else "", total) as span:
            carrier = telemetry.carrier_for_current_context()
            rest: Iterable[Sequence[NewJob]] = drawn
            if carrier is not None:
                first = [_with_trace(job, carrier) for job in first]
                rest = ([_with_trace(job, carrier) for job in chunk] for chunk in drawn)
            with self._span("job_insert"):
                result = await self.inner.job_insert_many(
                    itertools.chain([first], rest), total=total
                )
            if len(result.outcomes) == 1 and span.is_recording():
                # The stored job's id: on an idempotent repeat, the original job's.
                span.set_attribute("messaging.message.id", str(result.outcomes[0].job_id))
        _count_enqueued(result)
        return result

    def job_insert_blocking(self, new_job: NewJob, loop: AbstractEventLoop) -> InsertResult:
        # job_insert_many's telemetry, on the caller's thread (and so in the caller's context).
        if not telemetry.tracing():
            result = self.inner.job_insert_blocking(new_job, loop)
            _count_enqueued(result)
            return result
        with telemetry.enqueue_span(new_job.queue, 1) as span:
            carrier = telemetry.carrier_for_current_context()
            if carrier is not None:
                new_job = _with_trace(new_job, carrier)
            with self._span("job_insert"):
                result = self.inner.job_insert_blocking(new_job, loop)
            if span.is_recording():
                span.set_attribute("messaging.message.id", str(result.outcomes[0].job_id))
        _count_enqueued(result)
        return result

    async def database_identity(self) -> str:
        return await self.inner.database_identity()

    async def job_insert_joined(
        self, target: object, new_jobs: Sequence[NewJob], *, on_commit: Committed = None
    ) -> InsertResult:
        new_jobs = _traced(new_jobs)
        with self._span("job_insert_joined"):
            result = await self.inner.job_insert_joined(target, new_jobs, on_commit=on_commit)
        _count_enqueued(result)
        return result

    def job_insert_joined_sync(
        self,
        target: object,
        new_jobs: Sequence[NewJob],
        identity: str,
        *,
        on_commit: Committed = None,
    ) -> InsertResult:
        new_jobs = _traced(new_jobs)
        with self._span("job_insert_joined"):
            result = self.inner.job_insert_joined_sync(
                target, new_jobs, identity, on_commit=on_commit
            )
        _count_enqueued(result)
        return result

    async def job_complete_joined(
        self,
        target: object,
        lease: Lease,
        now: int,
        *,
        result: str | None = None,
        recorder: Recorder | None = None,
    ) -> bool:
        with self._span("job_complete_joined"):
            return await self.inner.job_complete_joined(
                target, lease, now, result=result, recorder=recorder
            )

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
        with self._span("job_complete_joined"):
            return self.inner.job_complete_joined_sync(
                target, lease, now, identity, result=result, recorder=recorder
            )

    async def job_completed_under(self, lease: Lease) -> bool:
        with self._span("job_completed_under"):
            return await self.inner.job_completed_under(lease)

    async def job_claim_many(self, request: ClaimRequest) -> ClaimBatch:
        with self._span("job_claim"):
            batch = await self.inner.job_claim_many(request)
        for job_type, count in Counter(job.job_type for job in batch.claimed).items():
            telemetry.record_claimed(request.queue, job_type, count)
        if batch.dead_lettered:
            telemetry.record_dead_lettered(
                request.queue, FailureCategory.LEASE_EXPIRED.value, batch.dead_lettered
            )
        return batch

    async def job_complete_many(
        self,
        leases: Sequence[Lease],
        now: int,
        *,
        durable: bool = False,
        results: Mapping[UUID, str] | None = None,
        recorder: Recorder | None = None,
    ) -> set[UUID]:
        with self._span("job_complete"):
            return await self.inner.job_complete_many(
                leases, now, durable=durable, results=results, recorder=recorder
            )

    async def job_snooze_many(
        self,
        snoozes: Sequence[SnoozedAttempt],
        now: int,
        *,
        durable: bool = False,
        recorder: Recorder | None = None,
    ) -> set[UUID]:
        with self._span("job_snooze"):
            return await self.inner.job_snooze_many(
                snoozes, now, durable=durable, recorder=recorder
            )

    async def job_fail_many(
        self,
        failures: Sequence[FailedAttempt],
        now: int,
        *,
        durable: bool = False,
        recorder: Recorder | None = None,
    ) -> set[UUID]:
        with self._span("job_fail"):
            return await self.inner.job_fail_many(failures, now, durable=durable, recorder=recorder)

    async def job_renew_lease(self, lease: Lease, now: int, expires_at: int) -> Lease | None:
        with self._span("job_renew_lease"):
            return await self.inner.job_renew_lease(lease, now, expires_at)

    async def job_set_progress(self, update: ProgressUpdate) -> bool:
        with self._span("job_set_progress"):
            return await self.inner.job_set_progress(update)

    async def job_get(self, ref: JobRef) -> JobStatus | None:
        with self._span("job_get"):
            return await self.inner.job_get(ref)

    async def job_get_payload(self, ref: JobRef) -> str | None:
        with self._span("job_get_payload"):
            return await self.inner.job_get_payload(ref)

    async def job_get_result(self, ref: JobRef) -> str | None:
        with self._span("job_get_result"):
            return await self.inner.job_get_result(ref)

    async def job_attempts(self, ref: JobRef) -> list[AttemptRecord] | None:
        with self._span("job_attempts"):
            return await self.inner.job_attempts(ref)

    async def job_replay(self, ref: JobRef, now: int) -> bool:
        with self._span("job_replay"):
            done = await self.inner.job_replay(ref, now)
        if done:
            telemetry.record_replayed(ref.queue)
        return done

    async def job_cancel(self, ref: JobRef, now: int) -> CancelOutcome:
        with self._span("job_cancel"):
            return await self.inner.job_cancel(ref, now)

    async def job_cancel_many(self, selection: JobSelection, now: int, limit: int) -> int:
        with self._span("job_cancel_many"):
            return await self.inner.job_cancel_many(selection, now, limit)

    async def job_delete(self, ref: JobRef) -> bool:
        with self._span("job_delete"):
            return await self.inner.job_delete(ref)

    async def job_delete_many(self, selection: JobSelection, limit: int) -> int:
        with self._span("job_delete_many"):
            return await self.inner.job_delete_many(selection, limit)

    async def job_count_selected(
        self, selection: JobSelection, *, deleting: bool
    ) -> dict[JobState, int]:
        with self._span("job_count_selected"):
            return await self.inner.job_count_selected(selection, deleting=deleting)

    async def job_cancelled_among(self, job_ids: Sequence[UUID]) -> set[UUID]:
        with self._span("job_cancelled_among"):
            return await self.inner.job_cancelled_among(job_ids)

    def cancel_notices(self) -> AsyncIterator[UUID] | None:
        return self.inner.cancel_notices()

    async def job_list(self, where: JobFilter) -> list[JobStatus]:
        with self._span("job_list"):
            return await self.inner.job_list(where)

    async def job_list_with_last_attempt(
        self, where: JobFilter
    ) -> list[tuple[JobStatus, AttemptRecord | None]]:
        with self._span("job_list_with_last_attempt"):
            return await self.inner.job_list_with_last_attempt(where)

    async def queue_counts(self, queue: str | None, now: int) -> list[QueueCounts]:
        with self._span("queue_counts"):
            return await self.inner.queue_counts(queue, now)

    async def queue_signal(self, query: SignalQuery) -> list[QueueSignal]:
        with self._span("queue_signal"):
            return await self.inner.queue_signal(query)

    async def job_throughput(self, query: ThroughputQuery) -> list[ThroughputBucket]:
        with self._span("job_throughput"):
            return await self.inner.job_throughput(query)

    async def job_prune(self, request: PruneRequest) -> PruneBatch:
        with self._span("job_prune"):
            return await self.inner.job_prune(request)

    async def queue_pause(self, queue: str, now: int) -> bool:
        with self._span("queue_pause"):
            return await self.inner.queue_pause(queue, now)

    async def queue_resume(self, queue: str, now: int) -> bool:
        with self._span("queue_resume"):
            return await self.inner.queue_resume(queue, now)

    async def queue_list_paused(self) -> list[PausedQueue]:
        with self._span("queue_list_paused"):
            return await self.inner.queue_list_paused()

    def queue_changes(self, queues: Sequence[str]) -> AsyncIterator[str] | None:
        return self.inner.queue_changes(queues)

    async def queue_limit_set(self, limit: ConcurrencyLimit | RateLimit, now: int) -> QueueLimit:
        with self._span("queue_limit_set"):
            return await self.inner.queue_limit_set(limit, now)

    async def queue_limit_clear(self, queue: str, now: int, kind: LimitKind = "all") -> bool:
        with self._span("queue_limit_clear"):
            return await self.inner.queue_limit_clear(queue, now, kind)

    async def queue_limit_list(self) -> list[QueueLimit]:
        with self._span("queue_limit_list"):
            return await self.inner.queue_limit_list()

    async def queue_limit_usage(
        self, queue: str | None, now: int, *, keys: int = 20
    ) -> list[QueueLimitUsage]:
        with self._span("queue_limit_usage"):
            return await self.inner.queue_limit_usage(queue, now, keys=keys)

    async def schedule_list(self) -> list[ScheduleState]:
        with self._span("schedule_list"):
            return await self.inner.schedule_list()

    async def schedule_advance(self, name: str, slot_at: int, now: int) -> bool:
        with self._span("schedule_advance"):
            return await self.inner.schedule_advance(name, slot_at, now)

    async def schedule_pause(self, name: str, now: int) -> bool:
        with self._span("schedule_pause"):
            return await self.inner.schedule_pause(name, now)

    async def schedule_resume(self, name: str, now: int) -> bool:
        with self._span("schedule_resume"):
            return await self.inner.schedule_resume(name, now)

    async def chain_insert(self, steps: Sequence[LinkedJob]) -> tuple[list[UUID], bool]:
        with telemetry.enqueue_span(steps[0].job.queue, len(steps)):
            steps = _traced_links(steps)
            with self._span("chain_insert"):
                ids, created = await self.inner.chain_insert(steps)
        _count_linked(steps, repeated=not created)
        return ids, created

    async def batch_insert(
        self, batch: NewBatch, members: Sequence[LinkedJob], callback: LinkedJob | None
    ) -> None:
        linked = [*members, callback] if callback is not None else list(members)
        with telemetry.enqueue_span(linked[0].job.queue, len(linked)):
            linked = _traced_links(linked)
            with self._span("batch_insert"):
                await self.inner.batch_insert(
                    batch, linked[: len(members)], linked[-1] if callback is not None else None
                )
        _count_linked(linked, repeated=False)

    async def chain_steps(self, chain_id: UUID, tenant_id: str | None) -> list[JobStatus]:
        with self._span("chain_steps"):
            return await self.inner.chain_steps(chain_id, tenant_id)

    async def batch_get(self, batch_id: UUID, tenant_id: str | None) -> BatchRecord | None:
        with self._span("batch_get"):
            return await self.inner.batch_get(batch_id, tenant_id)

    async def batch_list(self, limit: int, offset: int = 0) -> list[BatchRecord]:
        with self._span("batch_list"):
            return await self.inner.batch_list(limit, offset)

    async def job_find(self, job_id: UUID) -> JobStatus | None:
        with self._span("job_find"):
            return await self.inner.job_find(job_id)

    async def worker_register(self, worker: WorkerRecord) -> None:
        with self._span("worker_register"):
            await self.inner.worker_register(worker)

    async def worker_heartbeat(self, beat: Heartbeat) -> None:
        with self._span("worker_heartbeat"):
            await self.inner.worker_heartbeat(beat)

    async def worker_list(self, since: int) -> list[WorkerRecord]:
        with self._span("worker_list"):
            return await self.inner.worker_list(since)

    async def schema_revision(self) -> str | None:
        return await self.inner.schema_revision()

    def wakeups(self, queues: Sequence[str]) -> AsyncIterator[str] | None:
        return self.inner.wakeups(queues)

    async def close(self) -> None:
        await self.inner.close()


def _traced(new_jobs: Sequence[NewJob]) -> Sequence[NewJob]:
    """``new_jobs`` carrying the current trace context, when a tracer records one."""
    carrier = telemetry.carrier_for_current_context() if telemetry.tracing() else None
    return new_jobs if carrier is None else [_with_trace(job, carrier) for job in new_jobs]


_QUEUE_TYPE = operator.attrgetter("queue", "job_type")


def _count_enqueued(result: InsertResult) -> None:
    jobs, outcomes = result
    counts: Mapping[tuple[str, str, bool], int]
    if len(jobs) == 1:  # a one-job enqueue, without building a Counter
        counts = {(jobs[0].queue, jobs[0].job_type, not outcomes[0].inserted): 1}
    elif isinstance(outcomes, AllInserted):  # a bulk insert that created every job: no loop
        counts = {(q, t, False): n for (q, t), n in Counter(map(_QUEUE_TYPE, jobs)).items()}
    else:
        counts = Counter(
            (job.queue, job.job_type, not outcome.inserted)
            for job, outcome in zip(jobs, outcomes, strict=True)
        )
    for (queue, job_type, repeated), count in counts.items():
        telemetry.record_enqueued(queue, job_type, repeated=repeated, count=count)


def _with_trace(job: NewJob, carrier: str) -> NewJob:
    if job.trace_context is not None:
        return job
    return job._replace(trace_context=carrier)


def _traced_links(linked: Sequence[LinkedJob]) -> list[LinkedJob]:
    """``linked`` carrying the current trace context, as :meth:`job_insert_many` adds it."""
    carrier = telemetry.carrier_for_current_context() if telemetry.tracing() else None
    if carrier is None:
        return list(linked)
    return [one._replace(job=_with_trace(one.job, carrier)) for one in linked]


def _count_linked(linked: Sequence[LinkedJob], *, repeated: bool) -> None:
    counts = Counter((one.job.queue, one.job.job_type) for one in linked)
    for (queue, job_type), count in counts.items():
        telemetry.record_enqueued(queue, job_type, repeated=repeated, count=count)
