"""Between rows and values: the columns the shared statements return, and how a row becomes a
job status, a claimed job, a count or a worker record (and a new job becomes a row). Shared by
every SQL dialect."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from caravel.attempts import AttemptOutcome, AttemptRecord
from caravel.clock import from_ms
from caravel.jobs import ClaimedJob, JobState, JobStatus, Lease
from caravel.limits import HELD_DUE_AT
from caravel.progress import meta_from, progress_from
from caravel.store.links import BatchRecord, LinkedJob
from caravel.store.protocol import (
    ClaimBatch,
    NewJob,
    QueueCounts,
    ThroughputBucket,
    WorkerRecord,
)
from caravel.store.schema import claim_rank_of, jobs
from caravel.tags import tags_from

__all__ = [
    "CLAIM_RETURNING",
    "STATUS_COLUMNS",
    "attempt_from_row",
    "attempts_from_rows",
    "batch_from_row",
    "claimed_from_rows",
    "counts_from_row",
    "job_row",
    "job_row_columns",
    "linked_row",
    "status_from_row",
    "throughput_from_row",
    "worker_from_row",
    "worker_row",
]

RUNNING = JobState.RUNNING.value
READY = JobState.READY.value

#: What a job's status is read from.
STATUS_COLUMNS = (
    jobs.c.id,
    jobs.c.queue,
    jobs.c.tenant_id,
    jobs.c.job_type,
    jobs.c.state,
    jobs.c.attempt,
    jobs.c.max_attempts,
    jobs.c.due_at,
    jobs.c.created_at,
    jobs.c.updated_at,
    jobs.c.started_at,
    jobs.c.finished_at,
    jobs.c.lease_expires_at,
    jobs.c.last_failure,
    jobs.c.tags,
    jobs.c.error_class,
    jobs.c.snoozes,
    jobs.c.priority,
    jobs.c.pending_key,
    jobs.c.chain_id,
    jobs.c.chain_step,
    jobs.c.batch_id,
    jobs.c.workflow_id,
    jobs.c.progress,
    jobs.c.progress_at,
    jobs.c.meta,
    jobs.c.attempts_dropped,
)

#: What a claim returns, in the order :func:`claimed_from_rows` reads it.
CLAIM_RETURNING = (
    jobs.c.id,
    jobs.c.state,
    jobs.c.queue,
    jobs.c.tenant_id,
    jobs.c.job_type,
    jobs.c.payload,
    jobs.c.attempt,
    jobs.c.max_attempts,
    jobs.c.lease_token,
    jobs.c.lease_expires_at,
    jobs.c.started_at,
    jobs.c.due_at,
    jobs.c.trace_context,
    jobs.c.snoozes,
    jobs.c.priority,
    jobs.c.upstream,
    jobs.c.timeout_ms,
    jobs.c.partition_key,
    jobs.c.lease_nonce,
)


def _optional_time(ms: int | None) -> Any:
    return None if ms is None else from_ms(ms)


def status_from_row(row: Any, result: str | None = None) -> JobStatus:
    """A job's status; ``result`` is its stored result text, where the caller read it."""
    return JobStatus(
        job_id=row.id,
        queue=row.queue,
        tenant_id=row.tenant_id,
        job_type=row.job_type,
        state=JobState(row.state),
        attempt=row.attempt,
        max_attempts=row.max_attempts,
        due_at=from_ms(row.due_at),
        created_at=from_ms(row.created_at),
        updated_at=from_ms(row.updated_at),
        started_at=_optional_time(row.started_at),
        finished_at=_optional_time(row.finished_at),
        lease_expires_at=_optional_time(row.lease_expires_at),
        last_failure=row.last_failure,
        tags=tags_from(row.tags),
        error_class=row.error_class,
        snoozes=row.snoozes,
        priority=row.priority,
        result=None if result is None else json.loads(result),
        pending_key=row.pending_key,
        chain_id=row.chain_id,
        chain_step=row.chain_step,
        batch_id=row.batch_id,
        workflow_id=row.workflow_id,
        progress=progress_from(row.progress, row.progress_at),
        meta=meta_from(row.meta),
        attempts_dropped=row.attempts_dropped,
    )


def attempt_from_row(row: Any) -> AttemptRecord:
    """One attempt record (a row of ``caravel_attempts``, or an object with its columns)."""
    return AttemptRecord(
        attempt=row.attempt,
        lease_token=row.lease_token,
        outcome=AttemptOutcome(row.outcome),
        worker_id=row.worker_id,
        host=row.host,
        pid=row.pid,
        claimed_at=_optional_time(row.claimed_at),
        finished_at=_optional_time(row.finished_at),
        category=row.category,
        error_class=row.error_class,
        detail=row.detail,
        retry_at=_optional_time(row.retry_at),
    )


def attempts_from_rows(rows: Sequence[Any]) -> list[AttemptRecord] | None:
    """A job's records from :func:`~caravel.store.queries.attempt_history`'s rows: ``None``
    without a row (no such job), none for the one row of a job without records."""
    if not rows:
        return None
    return [attempt_from_row(row) for row in rows if row.lease_token is not None]


def claimed_from_rows(rows: Sequence[Sequence[Any]]) -> ClaimBatch:
    """The jobs a claim returned (columns in :data:`CLAIM_RETURNING` order), in claim order
    (:func:`~caravel.store.schema.claim_rank_of`: due time, moved earlier by priority);
    rows the claim dead-lettered instead (their last lease had expired) are only counted."""
    claimed: list[ClaimedJob] = []
    dead = 0
    for row in rows:
        (job_id, state, queue, tenant, job_type, payload, attempt, max_attempts, token, expires,
         started, due, trace, snoozes, priority, upstream, timeout_ms, key,
         nonce) = row  # fmt: skip
        if state != RUNNING:
            dead += 1
            continue
        lease = Lease(
            job_id=job_id,
            token=token,
            expires_at_ms=expires,
            claimed_at_ms=started,
            attempt=attempt,
            max_attempts=max_attempts,
            nonce=nonce,
        )
        claimed.append(
            ClaimedJob(
                lease=lease,
                queue=queue,
                tenant_id=tenant,
                job_type=job_type,
                payload=payload,
                due_at_ms=due,
                trace_context=trace,
                snoozes=snoozes,
                priority=priority,
                upstream=upstream,
                timeout_ms=timeout_ms,
                partition_key=key,
            )
        )
    claimed.sort(key=lambda job: claim_rank_of(job.due_at_ms, job.priority))
    return ClaimBatch(claimed=claimed, dead_lettered=dead)


def counts_from_row(row: Any) -> QueueCounts:
    return QueueCounts(
        queue=row.queue,
        ready=int(row.ready),
        delayed=int(row.delayed),
        held=int(row.held),
        running=int(row.running),
        expired=int(row.expired),
        # None (more than the exact limit) is replaced by the store's estimate.
        dead_letter=-1 if row.dead_letter is None else int(row.dead_letter),
        completed=-1 if row.completed is None else int(row.completed),
        oldest_ready_due_ms=None if row.oldest is None else int(row.oldest),
        cancelled=-1 if row.cancelled is None else int(row.cancelled),
    )


def throughput_from_row(row: Any, since: int, bucket_ms: int) -> ThroughputBucket:
    return ThroughputBucket(
        queue=row.queue,
        start=since + int(row.bucket) * bucket_ms,
        completed=int(row.completed),
        dead_lettered=int(row.dead_lettered),
    )


def worker_from_row(row: Any) -> WorkerRecord:
    return WorkerRecord(
        id=row.id,
        host=row.host,
        pid=row.pid,
        queues=tuple(q for q in row.queues.split(",") if q),
        concurrency=row.concurrency,
        started_at=row.started_at,
        heartbeat_at=row.heartbeat_at,
        in_flight=row.in_flight,
        stopped_at=row.stopped_at,
    )


def worker_row(worker: WorkerRecord) -> dict[str, Any]:
    return {
        "id": worker.id,
        "host": worker.host,
        "pid": worker.pid,
        "queues": ",".join(worker.queues),
        "concurrency": worker.concurrency,
        "started_at": worker.started_at,
        "heartbeat_at": worker.heartbeat_at,
        "in_flight": worker.in_flight,
        "stopped_at": None,
    }


def job_row_columns() -> tuple[str, ...]:
    """The columns :func:`job_row` fills, in its order."""
    return _JOB_ROW_COLUMNS


def linked_row(linked: LinkedJob) -> dict[str, Any]:
    """The row of a chain step or batch job: the job's own, with its links, and held (see
    :data:`~caravel.limits.HELD_DUE_AT`) while it waits for a release."""
    row = job_row(linked.job)
    if linked.held:
        row["due_at"] = row["available_at"] = HELD_DUE_AT
    row["chain_id"] = linked.chain_id
    row["chain_step"] = linked.chain_step
    row["chain_next"] = linked.chain_next
    row["batch_id"] = linked.batch_id
    return row


def batch_from_row(row: Any) -> BatchRecord:
    return BatchRecord(
        id=row.id,
        tenant_id=row.tenant_id,
        total=row.total,
        completed=row.completed,
        dead_letter=row.dead_letter,
        cancelled=row.cancelled,
        callback_id=row.callback_id,
        created_at=row.created_at,
        finished_at=row.finished_at,
        updated_at=row.updated_at,
    )


def job_row(job: NewJob) -> dict[str, Any]:
    """A new job's row, as every insert path writes it."""
    return {
        "id": job.id,
        "queue": job.queue,
        "job_type": job.job_type,
        "tenant_id": job.tenant_id,
        "idempotency_key": job.idempotency_key,
        "payload": job.payload,
        "state": READY,
        "attempt": 0,
        "max_attempts": job.max_attempts,
        "due_at": job.due_at,
        "available_at": job.due_at,
        "lease_token": 0,
        "created_at": job.created_at,
        "updated_at": job.created_at,
        "trace_context": job.trace_context,
        "tags": job.tags,
        "priority": job.priority,
        "pending_key": job.pending_key,
        "timeout_ms": job.timeout_ms,
        "partition_key": job.partition_key,
        "weight": job.weight,
    }


_JOB_ROW_COLUMNS = (
    "id",
    "queue",
    "job_type",
    "tenant_id",
    "idempotency_key",
    "payload",
    "state",
    "attempt",
    "max_attempts",
    "due_at",
    "available_at",
    "lease_token",
    "created_at",
    "updated_at",
    "trace_context",
    "tags",
    "priority",
    "pending_key",
    "timeout_ms",
    "partition_key",
    "weight",
)
