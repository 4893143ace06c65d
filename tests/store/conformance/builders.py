"""Rows and calls for the conformance tests, built by hand: no registry, no clock.

Every time is an explicit millisecond offset from :data:`T0`, and every job a :class:`NewJob`
with its own uuid7 id and a canonical JSON payload, so a test says exactly what it stores.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any
from uuid import UUID

from caravel._ids import uuid7
from caravel.chains import link_chain
from caravel.jobs import ClaimedJob, JobStatus, Lease
from caravel.limits import DEFAULT_ATTEMPT_HISTORY
from caravel.store.links import LinkedJob, NewBatch
from caravel.store.protocol import (
    ClaimBatch,
    ClaimRequest,
    ClaimSource,
    FailedAttempt,
    InsertResult,
    JobFilter,
    JobRef,
    NewJob,
    Store,
    WorkerRecord,
)

#: The suite's fixed "now": 2030-03-17T17:46:40Z, far from any real clock.
T0 = 1_900_000_000_000
LEASE_MS = 30_000
QUEUE = "default"
TENANT = "tenant-a"
JOB_TYPE = "tests.conformance.v1"


def payload(**fields: object) -> str:
    """Canonical JSON, as the codec writes it: keys sorted, no spaces."""
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def new_job(
    n: int = 0,
    *,
    queue: str = QUEUE,
    tenant: str = TENANT,
    key: str | None = None,
    job_type: str = JOB_TYPE,
    body: str | None = None,
    max_attempts: int = 3,
    created_at: int = T0,
    due_at: int | None = None,
    job_id: UUID | None = None,
    trace_context: str | None = None,
    priority: int = 0,
    partition_key: str | None = None,
    weight: int | None = None,
) -> NewJob:
    """A job created at ``created_at`` and due then (or at ``due_at``), with payload
    ``{"n": n}`` unless ``body`` says otherwise."""
    return NewJob(
        id=job_id if job_id is not None else uuid7(created_at),
        queue=queue,
        job_type=job_type,
        tenant_id=tenant,
        idempotency_key=key,
        payload=body if body is not None else payload(n=n),
        max_attempts=max_attempts,
        due_at=created_at if due_at is None else due_at,
        created_at=created_at,
        trace_context=trace_context,
        priority=priority,
        partition_key=partition_key,
        weight=weight,
    )


def many(count: int, *, keyed: bool = True, start: int = 0, **fields: Any) -> list[NewJob]:
    """``count`` jobs numbered from ``start``, keyed ``k-<n>`` unless ``keyed`` is false."""
    return [
        new_job(n, key=f"k-{n}" if keyed else None, **fields) for n in range(start, start + count)
    ]


def chunked(jobs: Sequence[NewJob], size: int) -> Iterator[Sequence[NewJob]]:
    """``jobs`` drawn lazily, ``size`` at a time (as the facade prepares them)."""
    for start in range(0, len(jobs), size):
        yield jobs[start : start + size]


async def insert(store: Store, jobs: Sequence[NewJob], *, chunk: int = 250) -> InsertResult:
    """Insert ``jobs`` in one call, drawn in chunks of ``chunk``, announcing their total."""
    return await store.job_insert_many(chunked(jobs, chunk), total=len(jobs))


async def claim(
    store: Store,
    now: int,
    limit: int = 10,
    *,
    queue: str = QUEUE,
    lease_ms: int = LEASE_MS,
    source: ClaimSource = "any",
    limited: bool = False,
    worker_id: UUID | None = None,
    attempt_history: int = DEFAULT_ATTEMPT_HISTORY,
) -> ClaimBatch:
    request = ClaimRequest(
        queue,
        limit,
        now,
        lease_ms,
        source,
        limited=limited,
        worker_id=worker_id,
        attempt_history=attempt_history,
    )
    return await store.job_claim_many(request)


async def claim_one(store: Store, now: int, **options: Any) -> ClaimedJob:
    """The one job a claim of one at ``now`` must return."""
    batch = await claim(store, now, 1, **options)
    assert len(batch.claimed) == 1, batch
    return batch.claimed[0]


async def fail(store: Store, lease: Lease, now: int, retry_at: int | None) -> set[UUID]:
    return await store.job_fail_many([FailedAttempt(lease, "HandlerFailed", retry_at)], now)


def ref(job: NewJob) -> JobRef:
    return JobRef(job.id, job.queue, job.tenant_id)


async def status(store: Store, job: NewJob) -> JobStatus:
    """The job's status, which must exist."""
    found = await store.job_get(ref(job))
    assert found is not None, f"job {job.id} not found"
    return found


async def everything(store: Store, **where: Any) -> list[JobStatus]:
    """Every job (matching ``where``), oldest first."""
    return await store.job_list(JobFilter(limit=10_000, oldest_first=True, **where))


def worker(started_at: int, queues: tuple[str, ...] = ("default",), **fields: int) -> WorkerRecord:
    """A worker that started at ``started_at`` and has not beaten since."""
    return WorkerRecord(
        id=uuid7(started_at),
        host=f"host-{started_at - T0}.example",
        pid=1_000 + started_at - T0,
        queues=queues,
        concurrency=fields.get("concurrency", 4),
        started_at=started_at,
        heartbeat_at=started_at,
        in_flight=fields.get("in_flight", 0),
    )


def ids(items: Iterable[NewJob | ClaimedJob | JobStatus]) -> list[UUID]:
    return [item.id if isinstance(item, NewJob) else item.job_id for item in items]


def chain(steps: Sequence[NewJob]) -> list[LinkedJob]:
    """``steps`` linked as a chain, as :func:`caravel.chains.prepare_chain` links them."""
    return link_chain(steps)


async def insert_batch(
    store: Store,
    members: Sequence[NewJob],
    callback: NewJob | None = None,
    *,
    tenant: str = TENANT,
    created_at: int = T0,
) -> NewBatch:
    """A batch of ``members`` (and ``callback``, held), as :func:`caravel.batches.prepare_batch`
    builds it; the batch it created."""
    batch = NewBatch(
        uuid7(created_at),
        tenant,
        len(members),
        None if callback is None else callback.id,
        created_at,
    )
    linked = [LinkedJob(job, batch_id=batch.id) for job in members]
    held = None if callback is None else LinkedJob(callback, held=True)
    await store.batch_insert(batch, linked, held)
    return batch
