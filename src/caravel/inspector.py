"""What operators read: queue counts, job listings, throughput, workers, one job's status and
payload, chains, batches and workflows.

:class:`QueueInspector` needs no job registry and cannot write by construction: it holds a
:class:`~caravel.store.protocol.ReadStore`, which offers no write operation, on connections the
database itself keeps read-only (SQLite ``mode=ro``, PostgreSQL
``default_transaction_read_only``). The command line and the dashboard read through it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING
from uuid import UUID

from caravel._closing import AsyncClosing
from caravel.attempts import AttemptRecord
from caravel.autoscaling import QueueScaling, ScalingSignal
from caravel.batches import BatchStatus, batch_status
from caravel.chains import ChainStatus, chain_status
from caravel.clock import Clock, SystemClock, duration_ms, from_ms
from caravel.errors import ValidationError
from caravel.jobs import DEFAULT_TENANT, JobState, JobStatus, WorkerInfo
from caravel.lookup import job_ref, parse_job_id
from caravel.migrate import require_current_schema
from caravel.store import open_reader
from caravel.store.protocol import (
    SHOWN_STATES,
    JobFilter,
    QueueCounts,
    QueueLimitUsage,
    QueueSignal,
    ReadStore,
    SignalQuery,
    ThroughputBucket,
    ThroughputQuery,
    WorkerRecord,
)
from caravel.tags import check_tag
from caravel.validation import check_identifier, check_int, check_queue_name, check_wire_name
from caravel.workflows.operations import read_workflow
from caravel.workflows.status import WorkflowStatus, workflow_status

if TYPE_CHECKING:
    import sqlalchemy as sa

__all__ = [
    "MAX_LIST_LIMIT",
    "MAX_LIST_OFFSET",
    "QueueInspector",
    "QueuePause",
    "ScheduleRecord",
]

#: The most jobs one listing returns, and the most it may skip.
MAX_LIST_LIMIT = 10_000
MAX_LIST_OFFSET = 1_000_000
#: The most buckets one throughput read covers.
MAX_BUCKETS = 1000


@dataclass(frozen=True, slots=True)
class QueuePause:
    """A paused queue: no worker claims its jobs until it is resumed."""

    queue: str
    paused_at: datetime


@dataclass(frozen=True, slots=True)
class QueueLimitRecord:
    """A queue's stored limits, as last set at ``updated_at``: its concurrency caps (see
    :class:`~caravel.ConcurrencyLimit`), at most ``concurrency`` of its jobs running at once and
    ``per_key`` per partition key, and whether its jobs are claimed ``fair`` across partition
    keys and with which ``weights``; its rates (see :class:`~caravel.RateLimit`), starts weighing
    at most ``rate`` within any window of ``period``, and ``rate_per_key`` per key. ``None``:
    no such cap (``period`` is ``None`` exactly when there is no rate)."""

    queue: str
    concurrency: int | None
    per_key: int | None
    updated_at: datetime
    rate: int | None = None
    rate_per_key: int | None = None
    period: timedelta | None = None
    fair: bool = False
    weights: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ScheduleRecord:
    """What the database holds of a schedule: the latest slot a scheduler handled (``None``
    before the first) and when it was paused (``None`` while it runs)."""

    name: str
    last_slot_at: datetime | None
    paused_at: datetime | None


class QueueInspector(AsyncClosing):
    """Read-only access to a queue database for operators (the command line, the dashboard,
    your own monitoring).

    ``target`` is a database URL (opened read-only) or a store opened with
    :func:`~caravel.store.open_reader`. Use it as an async context manager, or call
    :meth:`close`, to release its connections.
    """

    def __init__(self, target: str | sa.URL | ReadStore, *, clock: Clock | None = None) -> None:
        self.store: ReadStore = open_reader(target)
        self.clock: Clock = clock if clock is not None else SystemClock()

    async def close(self) -> None:
        """Release the database connections. Closing again does nothing."""
        await self.store.close()

    async def check_schema(self) -> None:
        """Raise :class:`~caravel.errors.SchemaNotReadyError` unless the database is at the
        library's newest migration."""
        await require_current_schema(self.store)

    async def get_status(
        self, job_id: UUID | str, queue: str, tenant_id: str = DEFAULT_TENANT
    ) -> JobStatus | None:
        """One job's status, matched exactly as :meth:`DatabaseQueue.get_status
        <caravel.DatabaseQueue.get_status>` matches it."""
        return await self.store.job_get(job_ref(job_id, queue, tenant_id))

    async def get_attempts(
        self, job_id: UUID | str, queue: str, tenant_id: str = DEFAULT_TENANT
    ) -> list[AttemptRecord] | None:
        """One job's attempt history, oldest first, matched exactly as
        :meth:`DatabaseQueue.get_attempts <caravel.DatabaseQueue.get_attempts>` matches it."""
        return await self.store.job_attempts(job_ref(job_id, queue, tenant_id))

    async def get_payload(
        self, job_id: UUID | str, queue: str, tenant_id: str = DEFAULT_TENANT
    ) -> str | None:
        """One job's stored payload text, matched exactly. Show it only to those allowed."""
        return await self.store.job_get_payload(job_ref(job_id, queue, tenant_id))

    async def get_result(
        self, job_id: UUID | str, queue: str, tenant_id: str = DEFAULT_TENANT
    ) -> str | None:
        """One job's stored result as JSON text, matched exactly, or ``None``. Results are the
        application's data: show them only to those allowed to see payloads."""
        return await self.store.job_get_result(job_ref(job_id, queue, tenant_id))

    async def queue_counts(self, queue: str | None = None) -> list[QueueCounts]:
        """Per-queue counts: ready (due now), delayed, running with a live lease, running with an
        expired lease, dead letters and completed. ``queue`` limits it to one queue."""
        if queue is not None:
            check_queue_name(queue)
        return await self.store.queue_counts(queue, self.clock.now_ms())

    async def paused_queues(self) -> list[QueuePause]:
        """The queues paused now (:meth:`DatabaseQueue.pause_queue
        <caravel.DatabaseQueue.pause_queue>`), by name, with when each was paused."""
        return [
            QueuePause(p.queue, from_ms(p.paused_at)) for p in await self.store.queue_list_paused()
        ]

    async def queue_limits(self) -> list[QueueLimitRecord]:
        """Every queue with a concurrency limit, fair dispatch or a rate limit, by name
        (:meth:`DatabaseQueue.set_queue_limit <caravel.DatabaseQueue.set_queue_limit>`)."""
        return [
            QueueLimitRecord(
                q.queue,
                q.concurrency,
                q.per_key,
                from_ms(q.updated_at),
                q.rate,
                q.rate_per_key,
                None if q.rate_period_ms is None else timedelta(milliseconds=q.rate_period_ms),
                q.fair,
                dict(q.weights),
            )
            for q in await self.store.queue_limit_list()
        ]

    async def queue_limit_usage(
        self, queue: str | None = None, *, keys: int = 20
    ) -> list[QueueLimitUsage]:
        """How each queue with a concurrency limit (or only ``queue``) stands against it now:
        its jobs running, its ready jobs waiting because of a limit, and with a per-key cap its
        ``keys`` busiest partition keys (0 to 1,000; see
        :class:`~caravel.store.values.QueueLimitUsage` for what counts as waiting)."""
        return await self.store.queue_limit_usage(queue, self.clock.now_ms(), keys=keys)

    async def list_schedules(self) -> list[ScheduleRecord]:
        """Every schedule the database has state for (one that ran a slot, or was paused), by
        name. What each schedule is (its cron or interval, its next slot) is in the code that
        registers it, not in the database."""
        return [
            ScheduleRecord(
                s.name,
                None if s.last_slot_at is None else from_ms(s.last_slot_at),
                None if s.paused_at is None else from_ms(s.paused_at),
            )
            for s in await self.store.schedule_list()
        ]

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
        shown_state: str | None = None,
        tag: str | None = None,
        batch_id: UUID | str | None = None,
    ) -> list[JobStatus]:
        """Recent jobs, newest first (oldest first with ``oldest_first``), without payloads.
        Every given filter must match. ``limit`` is 1 to 10000; ``offset`` skips that many
        matching jobs first, for paging (0 to 1000000). ``shown_state`` is one of the states
        :meth:`queue_counts` counts, judged now: ``ready`` (due), ``delayed`` (not due yet),
        ``running`` (lease live), ``expired`` (lease ended), ``dead_letter``, ``completed``.
        ``tag`` keeps the jobs carrying that exact tag (it scans the rows the other filters
        leave, so narrow by queue or state on a large table). ``batch_id`` keeps one batch's
        members (its callback is not a member: see :attr:`BatchStatus.callback_id
        <caravel.BatchStatus.callback_id>`)."""
        where = self._job_filter(
            queue=queue,
            tenant_id=tenant_id,
            state=state,
            job_type=job_type,
            limit=limit,
            offset=offset,
            oldest_first=oldest_first,
            shown_state=shown_state,
            tag=tag,
            batch_id=batch_id,
        )
        return await self.store.job_list(where)

    async def list_jobs_with_last_attempt(
        self,
        *,
        queue: str | None = None,
        tenant_id: str | None = None,
        state: JobState | None = None,
        job_type: str | None = None,
        limit: int = 50,
        offset: int = 0,
        oldest_first: bool = False,
        shown_state: str | None = None,
        tag: str | None = None,
        batch_id: UUID | str | None = None,
    ) -> list[tuple[JobStatus, AttemptRecord | None]]:
        """The jobs :meth:`list_jobs` lists with the same arguments, each with its latest
        attempt record (see :meth:`get_attempts`; ``None`` for a job that keeps none), read in
        one statement: what the dashboard's dead-letter page shows of each job's last failure."""
        where = self._job_filter(
            queue=queue,
            tenant_id=tenant_id,
            state=state,
            job_type=job_type,
            limit=limit,
            offset=offset,
            oldest_first=oldest_first,
            shown_state=shown_state,
            tag=tag,
            batch_id=batch_id,
        )
        return await self.store.job_list_with_last_attempt(where)

    def _job_filter(
        self,
        *,
        queue: str | None,
        tenant_id: str | None,
        state: JobState | None,
        job_type: str | None,
        limit: int,
        offset: int,
        oldest_first: bool,
        shown_state: str | None,
        tag: str | None,
        batch_id: UUID | str | None,
    ) -> JobFilter:
        """The filter of a listing's arguments, each checked; raises
        :class:`~caravel.errors.ValidationError` naming the first bad one."""
        if queue is not None:
            check_queue_name(queue)
        if tenant_id is not None:
            check_identifier(tenant_id, "tenant_id")
        if job_type is not None:
            check_wire_name(job_type, "job_type")
        if tag is not None:
            check_tag(tag)
        batch = None if batch_id is None else parse_job_id(batch_id, "batch_id")
        if state is not None and not isinstance(state, JobState):
            raise ValidationError("state", "must be a JobState")
        if shown_state is not None and shown_state not in SHOWN_STATES:
            raise ValidationError("shown_state", "must be " + ", ".join(SHOWN_STATES))
        check_int("limit", limit, 1, MAX_LIST_LIMIT)
        check_int("offset", offset, 0, MAX_LIST_OFFSET)
        return JobFilter(
            queue=queue,
            tenant_id=tenant_id,
            state=state,
            job_type=job_type,
            limit=limit,
            offset=offset,
            oldest_first=bool(oldest_first),
            shown=shown_state,
            now=self.clock.now_ms(),
            tag=tag,
            batch_id=batch,
        )

    async def list_batches(self, limit: int = 50, offset: int = 0) -> list[BatchStatus]:
        """Batches of every tenant, newest first. ``limit`` is 1 to 10000; ``offset`` skips
        that many first, for paging (0 to 1000000)."""
        check_int("limit", limit, 1, MAX_LIST_LIMIT)
        check_int("offset", offset, 0, MAX_LIST_OFFSET)
        return [batch_status(r) for r in await self.store.batch_list(limit, offset)]

    async def get_batch(self, batch_id: UUID | str) -> BatchStatus | None:
        """How batch ``batch_id`` stands, whatever its tenant; ``None`` when there is none."""
        record = await self.store.batch_get(parse_job_id(batch_id, "batch_id"), None)
        return None if record is None else batch_status(record)

    async def list_workflows(
        self, limit: int = 50, offset: int = 0, tenant_id: str | None = None
    ) -> list[WorkflowStatus]:
        """Workflows newest first (of one tenant, or of every tenant when ``None``), each with
        its state and counts; ``steps`` is left empty (:meth:`get_workflow` reads them)."""
        check_int("limit", limit, 1, 10_000)
        check_int("offset", offset, 0, 1_000_000)
        tenant = None if tenant_id is None else check_identifier(tenant_id, "tenant_id")
        records = await self.store.workflow_list(tenant, limit, offset)
        return [workflow_status(record, []) for record in records]

    async def get_workflow(self, workflow_id: UUID | str) -> WorkflowStatus | None:
        """Workflow ``workflow_id``, whatever its tenant, with its steps (no results: operators
        see no payloads); ``None`` when there is none."""
        found = parse_job_id(workflow_id, "workflow_id")
        return await read_workflow(self.store, found, None, results=False)

    async def get_chain(self, chain_id: UUID | str) -> ChainStatus | None:
        """Chain ``chain_id``'s steps in order and its state, whatever its tenant; ``None``
        when there is none. Any step's :attr:`~caravel.JobStatus.chain_id` names its chain."""
        found = parse_job_id(chain_id, "chain_id")
        return chain_status(found, await self.store.chain_steps(found, None))

    async def find_job(
        self, job_id: UUID | str, *, queue: str | None = None, tenant_id: str | None = None
    ) -> JobStatus | None:
        """The job with this id, whatever its queue and tenant; ``None`` when there is none.
        For an id known alone (a batch's callback, an id an operator pasted):
        :meth:`get_status` is the exact match. ``queue`` and ``tenant_id``, where given, must be
        the job's exactly, or it is not found (the ``caravel jobs show`` and ``jobs replay``
        flags)."""
        if queue is not None:
            check_queue_name(queue)
        if tenant_id is not None:
            check_identifier(tenant_id, "tenant_id")
        found = await self.store.job_find(parse_job_id(job_id, "job_id"))
        if found is None or queue not in (None, found.queue):
            return None
        return found if tenant_id in (None, found.tenant_id) else None

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
        if not 1 <= count <= MAX_BUCKETS:
            raise ValidationError("window", f"must span from 1 to {MAX_BUCKETS} buckets")
        now = self.clock.now_ms()
        last = now - now % bucket_ms
        since = last - (count - 1) * bucket_ms
        until = last + bucket_ms
        found = await self.store.job_throughput(ThroughputQuery(queue, since, until, bucket_ms))
        by_key = {(b.queue, b.start): b for b in found}
        queues = sorted({b.queue for b in found} | ({queue} if queue is not None else set()))
        return [
            by_key.get((name, start), ThroughputBucket(name, start, 0, 0))
            for name in queues
            for start in range(since, until, bucket_ms)
        ]

    async def scaling_signal(
        self,
        queue: str | None = None,
        *,
        lost_after: timedelta = timedelta(seconds=60),
        keys: int = 20,
    ) -> ScalingSignal:
        """What an autoscaler reads, per queue (or only ``queue``, always present, zeros
        included): jobs due now, jobs running, the oldest due job's age, jobs finished within
        the last minute, and the workers serving it heard from within ``lost_after``; for a
        queue with a concurrency limit, how it stands against it with its ``keys`` busiest
        partition keys (0 to 1,000).

        One statement over the jobs, workers and limits tables, each part served by an index;
        when a queue listed has a limit, the limits' read as :meth:`queue_limit_usage` makes
        it besides."""
        if queue is not None:
            check_queue_name(queue)
        check_int("keys", keys, 0, 1000)
        lost_ms = duration_ms(lost_after)
        if lost_ms <= 0:
            raise ValidationError("lost_after", "must be positive")
        now = self.clock.now_ms()
        query = SignalQuery(queue, now, now - 60_000, now - lost_ms)
        found = await self.store.queue_signal(query)
        usage = {}
        if any(s.limited for s in found):  # most queues have no limit: no second read then
            limited = await self.store.queue_limit_usage(queue, now, keys=keys)
            usage = {u.limit.queue: u for u in limited}
        if queue is not None and not found:
            found = [QueueSignal(queue, 0, 0, None, 0, 0)]
        return ScalingSignal(
            tuple(
                QueueScaling(
                    s.queue,
                    s.ready,
                    s.running,
                    0.0 if s.oldest_ready_due_ms is None else (now - s.oldest_ready_due_ms) / 1000,
                    s.finished,
                    s.workers,
                    usage.get(s.queue),
                )
                for s in found
            )
        )

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
        return [_worker_info(r, now, lost_ms) for r in records]


def _worker_info(record: WorkerRecord, now: int, lost_ms: int) -> WorkerInfo:
    if record.stopped_at is not None:
        state = "stopped"
    elif now - record.heartbeat_at > lost_ms:
        state = "lost"
    else:
        state = "running"
    return WorkerInfo(
        worker_id=record.id,
        host=record.host,
        pid=record.pid,
        queues=record.queues,
        concurrency=record.concurrency,
        started_at=from_ms(record.started_at),
        heartbeat_at=from_ms(record.heartbeat_at),
        in_flight=record.in_flight if record.stopped_at is None else 0,
        state=state,
    )
