"""OpenTelemetry traces and metrics, all in this one module.

Caravel depends only on ``opentelemetry-api``. Without an SDK configured, every tracer, span and
instrument below is the API's no-op, and attribute work is skipped for spans that do not record.
Names, attributes and units are public API; ``docs/telemetry.md`` lists them.

Instrumentation is applied at the seams, once: :class:`InstrumentedStore` wraps every store
operation, :func:`job_span` wraps every job execution, and the worker, lease watchdog and outbox
call the ``record_*`` helpers with the outcome they already computed. Payloads, tenant ids,
idempotency keys and exception messages never become attributes; an exception is described by its
type name and Caravel's failure category only.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager, nullcontext
from typing import Any
from uuid import UUID

from opentelemetry import context as otel_context
from opentelemetry import metrics, propagate, trace
from opentelemetry.trace import INVALID_SPAN, Link, Span, SpanKind, Status, StatusCode

from caravel.jobs import ClaimedJob, JobStatus, Lease
from caravel.store.api import (
    ClaimBatch,
    ClaimSource,
    FailedAttempt,
    InsertOutcome,
    JobFilter,
    NewJob,
    QueueCounts,
    Store,
    ThroughputBucket,
    WorkerRecord,
)

__all__ = [
    "InstrumentedStore",
    "QueueGauges",
    "Span",
    "carrier_for_current_context",
    "job_span",
    "record_lease_lost",
    "record_outcome",
    "record_renewal",
]

SYSTEM = "caravel"
_VERSION = "0.1.0"

tracer = trace.get_tracer("caravel", _VERSION)
meter = metrics.get_meter("caravel", _VERSION)

# ----- instruments (names and units are documented in docs/telemetry.md) ----------------------

enqueued = meter.create_counter(
    "caravel.jobs.enqueued", unit="{job}", description="Jobs accepted by enqueue"
)
claimed_jobs = meter.create_counter(
    "caravel.jobs.claimed", unit="{job}", description="Claims taken (each is an attempt)"
)
completed = meter.create_counter(
    "caravel.jobs.completed", unit="{job}", description="Jobs acknowledged as completed"
)
failed = meter.create_counter(
    "caravel.jobs.failed", unit="{job}", description="Failed attempts, by failure category"
)
dead_lettered = meter.create_counter(
    "caravel.jobs.dead_lettered", unit="{job}", description="Jobs moved to dead letter"
)
replayed = meter.create_counter(
    "caravel.jobs.replayed", unit="{job}", description="Dead letters replayed"
)
duration = meter.create_histogram(
    "caravel.job.duration", unit="s", description="Handler run time per attempt"
)
queue_wait = meter.create_histogram(
    "caravel.job.queue_wait", unit="s", description="From due time to handler start"
)
renewals = meter.create_counter(
    "caravel.lease.renewals", unit="{renewal}", description="Lease renewals accepted"
)
leases_lost = meter.create_counter(
    "caravel.lease.lost",
    unit="{lease}",
    description="Attempts abandoned without acknowledgement, by reason",
)
in_flight = meter.create_up_down_counter(
    "caravel.worker.in_flight", unit="{job}", description="Handlers running now"
)
outbox_staged = meter.create_counter(
    "caravel.outbox.staged",
    unit="{intent}",
    description="Intents staged in an application transaction",
)
outbox_dispatched = meter.create_counter(
    "caravel.outbox.dispatched", unit="{intent}", description="Intents delivered to the queue"
)
outbox_stuck = meter.create_counter(
    "caravel.outbox.undeliverable",
    unit="{intent}",
    description="Relay passes that left an intent pending, by reason",
)


#: What ``get_tracer_provider`` returns while no SDK (or other real provider) is installed.
_NO_PROVIDER = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)


def _tracing() -> bool:
    """Whether a tracer provider is installed. Without one every span would be the API's no-op
    span, and the hot paths (a span per job and per store operation) should cost nothing."""
    return not isinstance(trace.get_tracer_provider(), _NO_PROVIDER)


def _traced(name: str, **options: Any) -> AbstractContextManager[Span]:
    """``tracer.start_as_current_span``, except that without a tracer provider nothing is
    started at all."""
    if not _tracing():
        return nullcontext(INVALID_SPAN)
    return tracer.start_as_current_span(name, **options)


def _base(queue: str) -> dict[str, str]:
    return {"messaging.system": SYSTEM, "messaging.destination.name": queue}


# ----- trace context carried by jobs ---------------------------------------------------------


def carrier_for_current_context() -> str | None:
    """The current trace context as W3C ``traceparent``/``tracestate`` JSON, or ``None`` when
    nothing is being traced. Stored with the job so its execution continues the trace."""
    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    text = json.dumps(carrier, separators=(",", ":"), sort_keys=True)
    return text if len(text) <= 512 else None


def _context_from(carrier: str | None) -> otel_context.Context | None:
    if not carrier:
        return None
    try:
        values = json.loads(carrier)
    except ValueError:
        return None
    if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
        return None
    return propagate.extract(values)


@contextmanager
def enqueue_span(jobs: Sequence[NewJob]) -> Iterator[Span]:
    """A producer span around an enqueue; inside it, jobs carry its context."""
    queue = jobs[0].queue if jobs else ""
    with _traced(f"send {queue}", kind=SpanKind.PRODUCER) as span:
        if span.is_recording():
            span.set_attributes({**_base(queue), "messaging.operation.type": "send"})
            if len(jobs) != 1:
                span.set_attribute("messaging.batch.message_count", len(jobs))
        yield span


@contextmanager
def job_span(claimed: ClaimedJob, now_ms: int) -> Iterator[Span]:
    """A consumer span around one job execution, continuing the trace that enqueued it, plus
    the queue-wait and in-flight metrics. (A plain context manager: it never awaits, and the
    worker enters one per job.)"""
    queue = claimed.queue
    labels = {"messaging.destination.name": queue, "caravel.job.type": claimed.job_type}
    queue_wait.record(max(0, now_ms - claimed.due_at_ms) / 1000, labels)
    in_flight.add(1, {"messaging.destination.name": queue})
    try:
        if not _tracing():
            yield INVALID_SPAN
            return
        parent = _context_from(claimed.trace_context)
        links = []
        if parent is not None:
            linked = trace.get_current_span(parent).get_span_context()
            if linked.is_valid:
                links.append(Link(linked))
        with tracer.start_as_current_span(
            f"process {queue}", context=parent, kind=SpanKind.CONSUMER, links=links
        ) as span:
            if span.is_recording():
                span.set_attributes(
                    {
                        **_base(queue),
                        "messaging.operation.type": "process",
                        "messaging.message.id": str(claimed.job_id),
                        "caravel.job.type": claimed.job_type,
                        "caravel.job.attempt": claimed.attempt,
                    }
                )
            yield span
    finally:
        in_flight.add(-1, {"messaging.destination.name": queue})


def mark_failure(span: Span, error_type: str, category: str) -> None:
    """Describe a failed attempt on its span: the exception's type and our category, never its
    message."""
    if span.is_recording():
        span.set_attributes({"error.type": error_type, "caravel.failure.category": category})
        span.set_status(Status(StatusCode.ERROR))


# ----- outcomes ------------------------------------------------------------------------------


def record_outcome(
    claimed: ClaimedJob,
    *,
    seconds: float,
    category: str | None,
    dead: bool,
    abandoned: str | None,
) -> None:
    labels = {"messaging.destination.name": claimed.queue, "caravel.job.type": claimed.job_type}
    outcome = abandoned or ("failed" if category else "completed")
    duration.record(seconds, {**labels, "caravel.outcome": outcome})
    if abandoned is not None:
        leases_lost.add(
            1, {"messaging.destination.name": claimed.queue, "caravel.reason": abandoned}
        )
    elif category is None:
        completed.add(1, labels)
    else:
        failed.add(1, {**labels, "caravel.failure.category": category})
        if dead:
            dead_lettered.add(1, {**labels, "caravel.failure.category": category})


def record_renewal(queue: str) -> None:
    renewals.add(1, {"messaging.destination.name": queue})


def record_lease_lost(queue: str, reason: str) -> None:
    leases_lost.add(1, {"messaging.destination.name": queue, "caravel.reason": reason})


def record_staged(queue: str, job_type: str) -> None:
    outbox_staged.add(1, {"messaging.destination.name": queue, "caravel.job.type": job_type})


def record_dispatched(queue: str, job_type: str) -> None:
    outbox_dispatched.add(1, {"messaging.destination.name": queue, "caravel.job.type": job_type})


def record_undeliverable(queue: str, reason: str) -> None:
    outbox_stuck.add(1, {"messaging.destination.name": queue, "caravel.reason": reason})


@contextmanager
def relay_span(count: int) -> Iterator[Span]:
    with _traced("caravel.outbox.dispatch", kind=SpanKind.PRODUCER) as span:
        if span.is_recording():
            span.set_attributes(
                {"messaging.system": SYSTEM, "messaging.batch.message_count": count}
            )
        yield span


# ----- the store seam ------------------------------------------------------------------------


class InstrumentedStore:
    """Wraps a :class:`~caravel.store.api.Store`: a client span per operation, and the metrics
    that follow from each operation's result."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.supports_listen_notify = inner.supports_listen_notify
        self.db_system = inner.db_system
        self._system = inner.db_system

    def __getattr__(self, name: str) -> Any:  # engine and dialect extras pass through
        return getattr(self.inner, name)

    @asynccontextmanager
    async def _span(self, operation: str) -> AsyncIterator[Span]:
        with _traced(f"caravel.store.{operation}", kind=SpanKind.CLIENT) as span:
            if span.is_recording():
                span.set_attributes(
                    {"db.system.name": self._system, "db.operation.name": operation}
                )
            yield span

    async def job_insert_many(self, jobs: Sequence[NewJob]) -> list[InsertOutcome]:
        if not _tracing():  # the one-job enqueue's hot path: no spans to open or carry
            outcomes = await self.inner.job_insert_many(jobs)
            _count_enqueued(jobs, outcomes)
            return outcomes
        with enqueue_span(jobs) as span:
            carrier = carrier_for_current_context()
            if carrier is not None:
                jobs = [_with_trace(job, carrier) for job in jobs]
            async with self._span("job_insert"):
                outcomes = await self.inner.job_insert_many(jobs)
            if len(outcomes) == 1 and span.is_recording():
                # The stored job's id: on an idempotent repeat, the original job's.
                span.set_attribute("messaging.message.id", str(outcomes[0].job_id))
        _count_enqueued(jobs, outcomes)
        return outcomes

    async def job_insert_chunks(
        self, chunks: Iterator[Sequence[NewJob]]
    ) -> tuple[list[NewJob], list[InsertOutcome]]:
        first = next(chunks, None)
        if first is None:
            return [], []
        with enqueue_span(first) as span:
            carrier = carrier_for_current_context()
            if carrier is not None:
                first = [_with_trace(job, carrier) for job in first]
                chunks = ([_with_trace(job, carrier) for job in chunk] for chunk in chunks)
            async with self._span("job_insert"):
                jobs, outcomes = await self.inner.job_insert_chunks(
                    itertools.chain([first], chunks)
                )
            if span.is_recording():
                span.set_attribute("messaging.batch.message_count", len(jobs))
        _count_enqueued(jobs, outcomes)
        return jobs, outcomes

    async def job_claim_many(
        self, queue: str, limit: int, now: int, lease_ms: int, source: ClaimSource = "any"
    ) -> ClaimBatch:
        async with self._span("job_claim"):
            batch = await self.inner.job_claim_many(queue, limit, now, lease_ms, source)
        for job_type, count in Counter(job.job_type for job in batch.claimed).items():
            claimed_jobs.add(
                count, {"messaging.destination.name": queue, "caravel.job.type": job_type}
            )
        if batch.dead_lettered:
            dead_lettered.add(
                batch.dead_lettered,
                {"messaging.destination.name": queue, "caravel.failure.category": "LeaseExpired"},
            )
        return batch

    async def job_complete_many(self, leases: Sequence[Lease], now: int) -> set[UUID]:
        async with self._span("job_complete"):
            return await self.inner.job_complete_many(leases, now)

    async def job_fail_many(self, failures: Sequence[FailedAttempt], now: int) -> set[UUID]:
        async with self._span("job_fail"):
            return await self.inner.job_fail_many(failures, now)

    async def job_renew_lease(self, lease: Lease, now: int, expires_at: int) -> Lease | None:
        async with self._span("job_renew_lease"):
            return await self.inner.job_renew_lease(lease, now, expires_at)

    async def job_get(self, job_id: UUID, queue: str, tenant_id: str) -> JobStatus | None:
        async with self._span("job_get"):
            return await self.inner.job_get(job_id, queue, tenant_id)

    async def job_get_payload(self, job_id: UUID, queue: str, tenant_id: str) -> str | None:
        async with self._span("job_get_payload"):
            return await self.inner.job_get_payload(job_id, queue, tenant_id)

    async def job_replay(self, job_id: UUID, queue: str, tenant_id: str, now: int) -> bool:
        async with self._span("job_replay"):
            done = await self.inner.job_replay(job_id, queue, tenant_id, now)
        if done:
            replayed.add(1, {"messaging.destination.name": queue})
        return done

    async def job_list(self, where: JobFilter) -> list[JobStatus]:
        async with self._span("job_list"):
            return await self.inner.job_list(where)

    async def queue_counts(self, queue: str | None, now: int) -> list[QueueCounts]:
        async with self._span("queue_counts"):
            return await self.inner.queue_counts(queue, now)

    async def job_throughput(
        self, queue: str | None, since: int, until: int, bucket_ms: int
    ) -> list[ThroughputBucket]:
        async with self._span("job_throughput"):
            return await self.inner.job_throughput(queue, since, until, bucket_ms)

    async def worker_register(self, worker: WorkerRecord) -> None:
        async with self._span("worker_register"):
            await self.inner.worker_register(worker)

    async def worker_heartbeat(
        self, worker_id: UUID, now: int, in_flight: int, *, stopped: bool = False
    ) -> None:
        async with self._span("worker_heartbeat"):
            await self.inner.worker_heartbeat(worker_id, now, in_flight, stopped=stopped)

    async def worker_list(self, since: int) -> list[WorkerRecord]:
        async with self._span("worker_list"):
            return await self.inner.worker_list(since)

    async def schema_revision(self) -> str | None:
        return await self.inner.schema_revision()

    def wakeups(self, queues: Sequence[str]) -> AsyncIterator[str] | None:
        return self.inner.wakeups(queues)

    async def close(self) -> None:
        await self.inner.close()


def _count_enqueued(jobs: Sequence[NewJob], outcomes: Sequence[InsertOutcome]) -> None:
    counts: Mapping[tuple[str, str, bool], int]
    if len(jobs) == 1:  # a one-job enqueue, without building a Counter
        counts = {(jobs[0].queue, jobs[0].job_type, not outcomes[0].inserted): 1}
    else:
        counts = Counter(
            (job.queue, job.job_type, not outcome.inserted)
            for job, outcome in zip(jobs, outcomes, strict=True)
        )
    for (queue, job_type, repeated), count in counts.items():
        enqueued.add(
            count,
            {
                "messaging.destination.name": queue,
                "caravel.job.type": job_type,
                "caravel.already_enqueued": repeated,
            },
        )


def _with_trace(job: NewJob, carrier: str) -> NewJob:
    if job.trace_context is not None:
        return job
    return job._replace(trace_context=carrier)


# ----- queue depth, read from the database ---------------------------------------------------


class QueueGauges:
    """Observable gauges for queue depth per state and the age of the oldest ready job.

    The gauges report the last snapshot given to :meth:`update`. One collector per deployment
    (a worker with ``WorkerOptions(queue_metrics_interval=...)``) is enough, so the database is
    not queried by every process. Use :func:`queue_gauges` for the process-wide instance.
    """

    def __init__(self) -> None:
        self.snapshot: list[QueueCounts] = []
        self.oldest_ready_age: dict[str, float] = {}
        meter.create_observable_gauge(
            "caravel.queue.depth",
            callbacks=[self._depth],
            unit="{job}",
            description="Jobs per queue and state (ready, delayed, running, expired, "
            "dead_letter, completed)",
        )
        meter.create_observable_gauge(
            "caravel.queue.oldest_ready_age",
            callbacks=[self._age],
            unit="s",
            description="How long the oldest due job of each queue has waited",
        )

    def update(self, counts: Iterable[QueueCounts], now_ms: int) -> None:
        self.snapshot = list(counts)
        self.oldest_ready_age = {
            c.queue: (
                0.0 if c.oldest_ready_due_ms is None else (now_ms - c.oldest_ready_due_ms) / 1000
            )
            for c in self.snapshot
        }

    def _depth(self, options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        for counts in self.snapshot:
            for state in ("ready", "delayed", "running", "expired", "dead_letter", "completed"):
                yield metrics.Observation(
                    getattr(counts, state),
                    {"messaging.destination.name": counts.queue, "caravel.state": state},
                )

    def _age(self, options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        for queue, age in self.oldest_ready_age.items():
            yield metrics.Observation(age, {"messaging.destination.name": queue})


_gauges: QueueGauges | None = None


def queue_gauges() -> QueueGauges:
    """The process-wide queue gauges (created, and registered with the meter, on first use)."""
    global _gauges
    if _gauges is None:
        _gauges = QueueGauges()
    return _gauges


class OutboxGauge:
    """``caravel.outbox.pending``: intents not yet dispatched, as the relay last counted them."""

    def __init__(self) -> None:
        self.pending: dict[str, int] = {}
        meter.create_observable_gauge(
            "caravel.outbox.pending",
            callbacks=[self._observe],
            unit="{intent}",
            description="Outbox intents not yet dispatched, per outbox table",
        )

    def _observe(self, options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        for table, count in self.pending.items():
            yield metrics.Observation(count, {"caravel.outbox.table": table})


_outbox_gauge: OutboxGauge | None = None


def record_outbox_pending(table: str, count: int) -> None:
    global _outbox_gauge
    if _outbox_gauge is None:
        _outbox_gauge = OutboxGauge()
    _outbox_gauge.pending[table] = count
