"""OpenTelemetry traces and metrics on every database, with the real SDK.

The SDK's providers can be installed only once per process, so one tracer provider (an in-memory
exporter behind a gate that is open only while a test of this folder runs) and one meter provider
(an in-memory reader, cumulative) are installed for the whole session (``conftest.py``). Counters
and histograms are asserted as the change since the test started; gauges as their current
reading. That no secret becomes telemetry is ``test_secrets.py``.

Worker processes are real subprocesses (``tests/apps/traced_worker.py`` with its own SDK, and
``tests/apps/untraced_cycles.py`` with none). Time is moved by a :class:`ManualClock`.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

import pytest
import sqlalchemy as sa
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    StatusCode,
    TraceFlags,
    TraceState,
)
from sqlalchemy.orm import Session

from caravel import (
    ConcurrencyLimit,
    DatabaseQueue,
    JobContext,
    JobRegistry,
    JobState,
    Leases,
    Outbox,
    OutboxRelay,
    QueueWorker,
    RateLimit,
    SyncQueue,
    WorkerOptions,
    Workflow,
    add_outbox,
)
from caravel.clock import from_ms
from caravel.gauges import queue_gauges
from caravel.queue import PREPARE_CHUNK
from caravel.store.protocol import JobRef
from caravel.store.schema import jobs
from caravel.store.urls import backend_of, sync_url
from caravel.testing import ManualClock, drain
from caravel.worker.presence import gauge_values, limit_values
from tests.support import (
    LEASE,
    Add,
    Report,
    SteppingClock,
    dispatch,
    engine_of,
    inspector_of,
    noop,
    open_queue,
    registry_for,
    until_watching,
    within,
)
from tests.support.databases import SqliteTemplate, create_database_like, drop_database
from tests.support.processes import ROOT
from tests.support.telemetry import Telemetry

T = TypeVar("T")

#: A safety net against a hung test, never a way to let time pass.
SUBPROCESS_TIMEOUT = 120.0

app_tracer = trace.get_tracer("tests.telemetry")


# ----- helpers ------------------------------------------------------------------------------


def hex_trace(context: SpanContext) -> str:
    return f"{context.trace_id:032x}"


def hex_span(context: SpanContext) -> str:
    return f"{context.span_id:016x}"


def traceparent_of(carrier: str) -> tuple[str, str, bool]:
    """The trace id, parent span id and sampled flag of a stored W3C carrier."""
    version, trace_id, span_id, flags = json.loads(carrier)["traceparent"].split("-")
    assert version == "00"
    return trace_id, span_id, bool(int(flags, 16) & 1)


def db_system(url: str) -> str:
    return backend_of(url)


async def stored_trace_context(queue: DatabaseQueue, job_id: UUID) -> str | None:
    async with engine_of(queue).connect() as conn:
        value: str | None = await conn.scalar(
            sa.select(jobs.c.trace_context).where(jobs.c.id == job_id)
        )
        return value


def current_context() -> SpanContext:
    return trace.get_current_span().get_span_context()


def run_app(module: str, env: dict[str, str]) -> dict[str, Any]:
    """Run ``python -m module`` from the repository root; return the JSON it printed."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-m", module],
        cwd=ROOT,
        env={**clean, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# ----- the span tree ------------------------------------------------------------------------


async def test_enqueue_and_run_once_continue_the_request_trace(
    db_url: str, otel: Telemetry
) -> None:
    seen: list[SpanContext] = []

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        seen.append(current_context())

    async with open_queue(db_url, registry_for(handle)) as queue, QueueWorker(queue) as worker:
        with app_tracer.start_as_current_span("request") as request:
            job = await queue.enqueue(Add(1), dispatch(queue="mail"))
        request_ctx = request.get_span_context()

        send = otel.one("send mail")
        assert send.kind is SpanKind.PRODUCER
        assert send.context.trace_id == request_ctx.trace_id
        assert send.parent is not None
        assert send.parent.span_id == request_ctx.span_id
        assert dict(send.attributes or {}) == {
            "messaging.system": "caravel",
            "messaging.destination.name": "mail",
            "messaging.operation.type": "send",
            "messaging.message.id": str(job.job_id),
        }

        insert = otel.one("caravel.store.job_insert")
        assert insert.kind is SpanKind.CLIENT
        assert insert.parent is not None
        assert insert.parent.span_id == send.context.span_id
        assert dict(insert.attributes or {}) == {
            "db.system.name": db_system(db_url),
            "db.operation.name": "job_insert",
        }

        carrier = await stored_trace_context(queue, job.job_id)
        assert carrier is not None
        assert traceparent_of(carrier) == (hex_trace(request_ctx), hex_span(send.context), True)

        otel.clear_spans()
        assert await worker.run_once("mail") is True

    process = otel.one("process mail")
    assert process.kind is SpanKind.CONSUMER
    assert process.context.trace_id == request_ctx.trace_id
    assert process.parent is not None
    assert process.parent.span_id == send.context.span_id
    assert process.parent.is_remote
    assert dict(process.attributes or {}) == {
        "messaging.system": "caravel",
        "messaging.destination.name": "mail",
        "messaging.operation.type": "process",
        "messaging.message.id": str(job.job_id),
        "caravel.job.type": "tests.add.v1",
        "caravel.job.attempt": 1,
        "caravel.attempt.outcome": "completed",
    }
    assert [(link.context.trace_id, link.context.span_id) for link in process.links] == [
        (send.context.trace_id, send.context.span_id)
    ]
    assert process.status.status_code is StatusCode.UNSET
    assert process.events == ()

    # The handler runs inside the process span.
    assert seen == [process.context]

    for operation in ("job_claim", "job_complete"):
        span = otel.one(f"caravel.store.{operation}")
        assert span.kind is SpanKind.CLIENT
        assert (span.attributes or {})["db.system.name"] == db_system(db_url)
        assert (span.attributes or {})["db.operation.name"] == operation


async def test_a_synchronous_handler_runs_inside_the_process_span(
    db_url: str, otel: Telemetry
) -> None:
    """Spans a synchronous handler starts (its database client, HTTP calls) must belong to the
    job's trace, as an asynchronous handler's do."""
    seen: list[SpanContext] = []

    def handle(job: Report, ctx: JobContext[Any]) -> None:
        seen.append(current_context())

    async with (
        open_queue(db_url, registry_for(report=handle)) as queue,
        QueueWorker(queue) as worker,
    ):
        with app_tracer.start_as_current_span("request") as request:
            await queue.enqueue(Report(report_id="r"), dispatch())
        assert await worker.run_once("default") is True

    process = otel.one("process default")
    assert process.context.trace_id == request.get_span_context().trace_id
    assert len(seen) == 1
    assert seen[0].trace_id == process.context.trace_id, "the handler thread lost the trace"
    assert seen[0] == process.context


async def test_enqueue_without_a_request_starts_a_trace_the_job_continues(
    db_url: str, otel: Telemetry
) -> None:
    async with open_queue(db_url) as queue, QueueWorker(queue) as worker:
        job = await queue.enqueue(Add(1), dispatch())
        send = otel.one("send default")
        assert send.parent is None
        assert (send.attributes or {})["messaging.message.id"] == str(job.job_id)
        assert await worker.run_once("default") is True
    process = otel.one("process default")
    assert process.context.trace_id == send.context.trace_id
    assert process.parent is not None
    assert process.parent.span_id == send.context.span_id


async def test_a_batch_enqueue_is_one_producer_span_and_every_job_continues_it(
    db_url: str, otel: Telemetry
) -> None:
    async with open_queue(db_url) as queue, QueueWorker(queue) as worker:
        with app_tracer.start_as_current_span("request") as request:
            results = await queue.enqueue_many(
                [(Add(i), dispatch()) for i in range(3)] + [(Report(report_id="r"), dispatch())]
            )
        send = otel.one("send default")
        assert dict(send.attributes or {}) == {
            "messaging.system": "caravel",
            "messaging.destination.name": "default",
            "messaging.operation.type": "send",
            "messaging.batch.message_count": 4,
        }
        assert send.parent is not None
        assert send.parent.span_id == request.get_span_context().span_id
        for _ in results:
            assert await worker.run_once("default") is True

    processes = otel.spans("process default")
    assert len(processes) == 4
    assert {(s.attributes or {})["messaging.message.id"] for s in processes} == {
        str(r.job_id) for r in results
    }
    for span in processes:
        assert span.context.trace_id == request.get_span_context().trace_id
        assert span.parent is not None
        assert span.parent.span_id == send.context.span_id


async def test_a_chain_and_a_batch_are_producer_spans_their_released_jobs_continue(
    db_url: str, otel: Telemetry
) -> None:
    q = {"messaging.destination.name": "default", "caravel.job.type": "tests.add.v1"}
    async with open_queue(db_url) as queue, QueueWorker(queue) as worker:
        with app_tracer.start_as_current_span("request") as request:
            chain = await queue.enqueue_chain([(Add(1), dispatch()), (Add(2), dispatch())])
            batch = await queue.enqueue_batch([(Add(3), dispatch())], callback=(Add(4), dispatch()))
        sends = otel.spans("send default")
        assert [(s.attributes or {})["messaging.batch.message_count"] for s in sends] == [2, 2]
        assert otel.delta("caravel.jobs.enqueued", {**q, "caravel.already_enqueued": False}) == 4
        for _ in range(4):  # each later step and the callback run once released
            assert await worker.run_once("default") is True
        assert await worker.run_once("default") is False
    processes = otel.spans("process default")
    ran = {(s.attributes or {})["messaging.message.id"] for s in processes}
    assert ran == {str(i) for i in (*chain.job_ids, *batch.job_ids, batch.callback_id)}
    for span in processes:
        assert span.context.trace_id == request.get_span_context().trace_id


async def test_a_batch_enqueued_in_chunks_is_one_producer_span_carried_by_every_job(
    db_url: str, otel: Telemetry
) -> None:
    size = PREPARE_CHUNK * 2 + 3  # prepared and inserted in three chunks
    q = {"messaging.destination.name": "default", "caravel.job.type": "tests.add.v1"}
    async with open_queue(db_url) as queue:
        await queue.enqueue(Add(0), dispatch("k-0"))
        otel.clear_spans()
        with app_tracer.start_as_current_span("request"):
            results = await queue.enqueue_many([(Add(i), dispatch(f"k-{i}")) for i in range(size)])
        send = otel.one("send default")
        assert (send.attributes or {})["messaging.batch.message_count"] == size
        assert otel.delta("caravel.jobs.enqueued", {**q, "caravel.already_enqueued": True}) == 1
        # The first job before the batch, and every job of the batch but the repeat.
        assert otel.delta("caravel.jobs.enqueued", {**q, "caravel.already_enqueued": False}) == size
        for index in (1, PREPARE_CHUNK + 1, size - 1):  # one job of each chunk
            stored = await queue.store.job_get_payload(
                JobRef(results[index].job_id, "default", "tenant-a")
            )
            assert stored == f'{{"amount":{index},"note":""}}'
        engine = queue.store.inner.engine
        async with engine.connect() as conn:
            carriers = (
                (
                    await conn.execute(
                        sa.select(jobs.c.trace_context).where(jobs.c.idempotency_key != "k-0")
                    )
                )
                .scalars()
                .all()
            )
    assert len(carriers) == size - 1
    parents = {tuple(json.loads(c)["traceparent"].split("-")[1:3]) for c in carriers}
    assert parents == {(f"{send.context.trace_id:032x}", f"{send.context.span_id:016x}")}


async def test_a_duplicate_enqueue_names_the_existing_job_on_its_producer_span(
    db_url: str, otel: Telemetry
) -> None:
    """An idempotent repeat creates no job: its send span must not name a message that does
    not exist, but the one the caller gets back."""
    async with open_queue(db_url) as queue:
        original = await queue.enqueue(Add(1), dispatch("k1"))
        otel.clear_spans()
        repeat = await queue.enqueue(Add(1), dispatch("k1"))
    assert repeat.already_enqueued
    assert repeat.job_id == original.job_id
    send = otel.one("send default")
    assert (send.attributes or {})["messaging.message.id"] == str(original.job_id)


async def test_a_sync_enqueue_continues_the_request_trace_of_its_calling_thread(
    db_url: str, otel: Telemetry
) -> None:
    """SyncQueue's one-job enqueue runs on the caller's thread: the same spans, metrics and
    stored trace context as the awaited one, under the caller's current span."""
    q = {"messaging.destination.name": "mail", "caravel.job.type": "tests.add.v1"}
    with SyncQueue(db_url, registry_for()) as queue:
        with app_tracer.start_as_current_span("request") as request:
            job = queue.enqueue(Add(1), dispatch("k1", queue="mail"))
        request_ctx = request.get_span_context()
        send = otel.one("send mail")
        assert send.kind is SpanKind.PRODUCER
        assert send.parent is not None
        assert send.parent.span_id == request_ctx.span_id
        assert (send.attributes or {})["messaging.message.id"] == str(job.job_id)
        insert = otel.one("caravel.store.job_insert")
        assert insert.parent is not None
        assert insert.parent.span_id == send.context.span_id
        carrier = queue.call(stored_trace_context, queue.queue, job.job_id)
        assert carrier is not None
        assert traceparent_of(carrier) == (hex_trace(request_ctx), hex_span(send.context), True)
        assert otel.delta("caravel.jobs.enqueued", {**q, "caravel.already_enqueued": False}) == 1

        otel.clear_spans()
        repeat = queue.enqueue(Add(1), dispatch("k1", queue="mail"))  # settled on the loop
    assert repeat.already_enqueued
    assert (otel.one("send mail").attributes or {})["messaging.message.id"] == str(job.job_id)
    assert otel.delta("caravel.jobs.enqueued", {**q, "caravel.already_enqueued": True}) == 1


async def test_a_trace_context_too_large_to_store_is_left_out(db_url: str, otel: Telemetry) -> None:
    state = TraceState([(f"vendor{i}", "x" * 40) for i in range(12)])
    parent = SpanContext(
        trace_id=0x1234,
        span_id=0x5678,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
        trace_state=state,
    )
    async with open_queue(db_url) as queue, QueueWorker(queue) as worker:
        token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(parent)))
        try:
            job = await queue.enqueue(Add(1), dispatch())
        finally:
            otel_context.detach(token)
        assert await stored_trace_context(queue, job.job_id) is None
        assert await worker.run_once("default") is True
    assert otel.one("send default").context.trace_id == 0x1234
    process = otel.one("process default")
    assert process.parent is None
    assert process.links == ()


@pytest.mark.parametrize(
    "stored",
    ["{{{", "[]", '{"traceparent": 5}', '{"traceparent": "00-garbage"}', ""],
    ids=["invalid-json", "not-an-object", "not-text", "bad-traceparent", "empty"],
)
async def test_a_damaged_stored_trace_context_starts_a_new_trace(
    db_url: str, otel: Telemetry, stored: str
) -> None:
    async with open_queue(db_url) as queue, QueueWorker(queue) as worker:
        job = await queue.enqueue(Add(1), dispatch())
        async with engine_of(queue).begin() as conn:
            await conn.execute(
                sa.update(jobs).where(jobs.c.id == job.job_id).values(trace_context=stored)
            )
        assert await worker.run_once("default") is True
        status = await queue.get_status(job.job_id, "default", "tenant-a")
        assert status is not None
        assert status.state is JobState.COMPLETED
    process = otel.one("process default")
    assert process.parent is None
    assert process.links == ()
    assert process.status.status_code is StatusCode.UNSET


async def test_a_retried_attempt_continues_the_same_trace_with_its_attempt_number(
    db_url: str, otel: Telemetry
) -> None:
    clock = ManualClock()

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        if ctx.attempt == 1:
            raise RuntimeError("once")

    async with (
        open_queue(db_url, registry_for(handle), clock=clock) as queue,
        QueueWorker(queue) as worker,
    ):
        with app_tracer.start_as_current_span("request") as request:
            await queue.enqueue(Add(1), dispatch())
        assert await worker.run_once("default") is True
        await clock.advance(timedelta(seconds=5))
        assert await worker.run_once("default") is True

    first, second = otel.spans("process default")
    assert [(s.attributes or {})["caravel.job.attempt"] for s in (first, second)] == [1, 2]
    assert first.status.status_code is StatusCode.ERROR
    assert second.status.status_code is StatusCode.UNSET
    for span in (first, second):
        assert span.context.trace_id == request.get_span_context().trace_id


# ----- across a real worker process ---------------------------------------------------------


async def test_a_worker_process_continues_the_trace_of_the_enqueue(
    db_url: str, otel: Telemetry, tmp_path: Path
) -> None:
    now = ManualClock(start=datetime.now(UTC))  # the worker process runs on the system clock
    async with open_queue(db_url, clock=now) as queue:
        with app_tracer.start_as_current_span("request") as request:
            job = await queue.enqueue(Add(1), dispatch(queue="remote"))
    request_ctx = request.get_span_context()
    send = otel.one("send remote")

    spans_file = tmp_path / "spans.jsonl"
    result = await asyncio.to_thread(
        run_app,
        "tests.support.apps.traced_worker",
        {
            "CARAVEL_TEST_URL": db_url,
            "CARAVEL_TEST_QUEUE": "remote",
            "CARAVEL_TEST_SPANS": str(spans_file),
        },
    )
    assert result["ran"] is True

    exported = [json.loads(line) for line in spans_file.read_text(encoding="utf-8").splitlines()]
    (process,) = [s for s in exported if s["name"] == "process remote"]
    assert process["kind"] == "CONSUMER"
    assert process["trace_id"] == hex_trace(request_ctx)
    assert process["parent_trace_id"] == hex_trace(request_ctx)
    assert process["parent_span_id"] == hex_span(send.context)
    assert process["links"] == [
        {"trace_id": hex_trace(send.context), "span_id": hex_span(send.context)}
    ]
    assert process["attributes"] == {
        "messaging.system": "caravel",
        "messaging.destination.name": "remote",
        "messaging.operation.type": "process",
        "messaging.message.id": str(job.job_id),
        "caravel.job.type": "tests.add.v1",
        "caravel.job.attempt": 1,
        "caravel.attempt.outcome": "completed",
    }
    assert process["status"] == {"code": "UNSET", "description": None}
    assert process["resource"]["service.name"] == "traced-worker"
    assert result["seen"] == [
        {
            "job_id": str(job.job_id),
            "recording": True,
            "trace_id": hex_trace(request_ctx),
            "span_id": process["span_id"],
        }
    ]
    store_spans = {s["name"] for s in exported if s["kind"] == "CLIENT"}
    assert {"caravel.store.job_claim", "caravel.store.job_complete"} <= store_spans
    for span in exported:
        if span["kind"] == "CLIENT":
            assert span["attributes"]["db.system.name"] == db_system(db_url)


# ----- metrics ------------------------------------------------------------------------------


async def test_job_metrics_count_a_scripted_run_exactly(db_url: str, otel: Telemetry) -> None:
    clock = ManualClock()

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        if job.amount == 2:
            raise RuntimeError("no")

    q = {"messaging.destination.name": "metered"}
    add = {**q, "caravel.job.type": "tests.add.v1"}
    report = {**q, "caravel.job.type": "tests.report.v1"}
    registry = registry_for(handle, noop)
    async with (
        open_queue(db_url, registry, clock=clock) as queue,
        QueueWorker(queue) as worker,
    ):
        await queue.enqueue(Add(1), dispatch("k1", queue="metered"))
        doomed = await queue.enqueue(Add(2), dispatch("k2", queue="metered", max_attempts=1))
        await queue.enqueue(Report(report_id="r"), dispatch(queue="metered"))
        duplicate = await queue.enqueue(Add(1), dispatch("k1", queue="metered"))
        assert duplicate.already_enqueued

        assert otel.delta("caravel.jobs.enqueued", q) == 4
        assert otel.delta("caravel.jobs.enqueued", {**add, "caravel.already_enqueued": False}) == 2
        assert otel.delta("caravel.jobs.enqueued", {**add, "caravel.already_enqueued": True}) == 1
        assert (
            otel.delta("caravel.jobs.enqueued", {**report, "caravel.already_enqueued": False}) == 1
        )
        assert (
            otel.delta("caravel.jobs.enqueued", {**report, "caravel.already_enqueued": True}) == 0
        )

        await clock.advance(timedelta(seconds=2))  # every job has waited 2 s when it starts
        runs = await drain(queue, queues=["metered"])
        assert sorted(run.outcome for run in runs) == ["completed", "completed", "dead_letter"]

        assert otel.delta("caravel.jobs.claimed", q) == 3
        assert otel.delta("caravel.jobs.claimed", add) == 2
        assert otel.delta("caravel.jobs.claimed", report) == 1
        assert otel.delta("caravel.jobs.completed", q) == 2
        assert otel.delta("caravel.jobs.completed", add) == 1
        assert otel.delta("caravel.jobs.completed", report) == 1
        assert otel.delta("caravel.jobs.failed", q) == 1
        assert (
            otel.delta("caravel.jobs.failed", {**add, "caravel.failure.category": "HandlerFailed"})
            == 1
        )
        assert otel.delta("caravel.jobs.dead_lettered", q) == 1
        assert (
            otel.delta(
                "caravel.jobs.dead_lettered", {**add, "caravel.failure.category": "HandlerFailed"}
            )
            == 1
        )
        assert otel.delta("caravel.job.duration", q) == 3
        assert otel.delta("caravel.job.duration", {**q, "caravel.outcome": "completed"}) == 2
        assert otel.delta("caravel.job.duration", {**add, "caravel.outcome": "failed"}) == 1
        assert otel.delta("caravel.job.queue_wait", q) == 3
        assert otel.delta("caravel.job.queue_wait", add) == 2
        assert otel.delta_sum("caravel.job.queue_wait", q) == pytest.approx(6.0)
        assert otel.delta("caravel.worker.in_flight", q) == 0
        assert otel.delta("caravel.lease.lost", q) == 0
        assert otel.delta("caravel.jobs.replayed", q) == 0

        assert await queue.replay(doomed.job_id, "metered", "tenant-a") is True
        assert await queue.replay(doomed.job_id, "metered", "tenant-a") is False  # not dead now
        assert otel.delta("caravel.jobs.replayed", q) == 1
        assert len(otel.spans("caravel.store.job_replay")) == 2

        assert await worker.run_once("metered") is True  # fails again: its last attempt
        assert otel.delta("caravel.jobs.claimed", q) == 4
        assert otel.delta("caravel.jobs.failed", q) == 2
        assert otel.delta("caravel.jobs.dead_lettered", q) == 2


async def test_a_lease_expiring_on_a_claim_counts_a_dead_letter(
    db_url: str, otel: Telemetry
) -> None:
    clock = ManualClock()
    q = {"messaging.destination.name": "default"}
    async with open_queue(db_url, clock=clock, max_attempts=1) as queue:
        await queue.enqueue(Add(1), dispatch())
        assert await Leases(queue).claim("default") is not None  # a worker that then vanished
        await clock.advance(LEASE + timedelta(milliseconds=1))
        assert await Leases(queue).claim("default") is None
    assert otel.delta("caravel.jobs.claimed", q) == 1
    assert (
        otel.delta("caravel.jobs.dead_lettered", {**q, "caravel.failure.category": "LeaseExpired"})
        == 1
    )
    assert otel.delta("caravel.jobs.failed", q) == 0


async def test_lease_renewals_are_counted(db_url: str, otel: Telemetry) -> None:
    clock = SteppingClock()
    finish = asyncio.Event()

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        await finish.wait()

    q = {"messaging.destination.name": "default"}
    async with (
        open_queue(
            db_url,
            registry_for(handle),
            clock=clock,
            lease_renewal_interval=timedelta(seconds=10),
        ) as queue,
        QueueWorker(queue) as worker,
    ):
        await queue.enqueue(Add(1), dispatch())
        task = asyncio.ensure_future(worker.run_once("default"))
        await until_watching(clock, task)
        assert otel.delta("caravel.worker.in_flight", q) == 1
        assert otel.delta("caravel.lease.renewals", q) == 0
        for renewed in (1, 2):
            await clock.advance(timedelta(seconds=10))
            await until_watching(clock, task)
            assert otel.delta("caravel.lease.renewals", q) == renewed
        finish.set()
        assert await within(task) is True

    assert otel.delta("caravel.lease.renewals", q) == 2
    assert otel.delta("caravel.worker.in_flight", q) == 0
    assert otel.delta("caravel.jobs.completed", q) == 1
    renewals = otel.spans("caravel.store.job_renew_lease")
    assert len(renewals) == 2
    for span in renewals:
        assert (span.attributes or {})["db.system.name"] == db_system(db_url)


async def test_a_handler_past_its_lease_counts_a_lost_lease(db_url: str, otel: Telemetry) -> None:
    clock = SteppingClock()
    never = asyncio.Event()

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        await never.wait()

    q = {"messaging.destination.name": "default"}
    async with (
        open_queue(db_url, registry_for(handle), clock=clock) as queue,
        QueueWorker(queue) as worker,
    ):
        await queue.enqueue(Add(1), dispatch())
        task = asyncio.ensure_future(worker.run_once("default"))
        await until_watching(clock, task)
        await clock.advance(LEASE)
        assert await within(task) is True

    assert otel.delta("caravel.lease.lost", {**q, "caravel.reason": "lease_expired"}) == 1
    assert otel.delta("caravel.lease.lost", q) == 1
    assert otel.delta("caravel.job.duration", {**q, "caravel.outcome": "lease_expired"}) == 1
    assert otel.delta("caravel.jobs.completed", q) == 0
    assert otel.delta("caravel.jobs.failed", q) == 0
    assert otel.delta("caravel.worker.in_flight", q) == 0
    assert otel.spans("caravel.store.job_complete") == []
    assert otel.spans("caravel.store.job_fail") == []
    assert len(otel.spans("process default")) == 1


async def test_a_timed_out_attempt_counts_as_failed_and_a_stuck_handler_as_stuck(
    db_url: str, otel: Telemetry
) -> None:
    """A synchronous handler that ignores its timeout: ``caravel.jobs.stuck`` once the grace
    ran out, then a failed attempt of category ``TimedOut`` when its lease ends; never a lost
    lease."""
    clock = SteppingClock()
    release = threading.Event()
    started = asyncio.Event()
    loop = asyncio.get_running_loop()

    def handle(job: Add, ctx: JobContext[Any]) -> None:
        loop.call_soon_threadsafe(started.set)
        release.wait(60)  # a safety net: the test releases it at its end

    registry = JobRegistry()
    registry.register("tests.add.v1", Add, handle, timeout=timedelta(seconds=5))
    q = {"messaging.destination.name": "default"}
    add = {**q, "caravel.job.type": "tests.add.v1"}
    options = WorkerOptions(timeout_grace=timedelta(seconds=2))
    async with (
        open_queue(db_url, registry, clock=clock, max_attempts=1) as queue,
        QueueWorker(queue, options=options) as worker,
    ):
        await queue.enqueue(Add(1), dispatch())
        task = asyncio.ensure_future(worker.run_once("default"))
        try:
            await within(started.wait())
            await until_watching(clock, task)
            await clock.advance(timedelta(seconds=5))  # the timeout: asked, ignored
            await until_watching(clock, task)
            assert otel.delta("caravel.jobs.stuck", q) == 0
            await clock.advance(timedelta(seconds=2))  # the grace ran out
            await until_watching(clock, task)
            assert otel.delta("caravel.jobs.stuck", add) == 1
            assert otel.delta("caravel.jobs.failed", q) == 0
            await clock.advance(LEASE)  # the lease (never renewed) ends
            assert await within(task) is True
        finally:
            release.set()

    assert otel.delta("caravel.jobs.stuck", q) == 1
    timed_out = {**add, "caravel.failure.category": "TimedOut"}
    assert otel.delta("caravel.jobs.failed", timed_out) == 1
    assert otel.delta("caravel.jobs.dead_lettered", timed_out) == 1
    assert otel.delta("caravel.lease.lost", q) == 0
    (span,) = otel.spans("process default")
    assert (span.attributes or {})["caravel.failure.category"] == "TimedOut"


async def test_queue_gauges_report_depth_per_state_and_the_oldest_ready_age(
    db_url: str, otel: Telemetry
) -> None:
    clock = ManualClock()
    gauges = queue_gauges()
    gauges.update({}, {})  # forget earlier tests' snapshots
    async with (
        open_queue(db_url, clock=clock, max_attempts=1) as queue,
        open_queue(db_url, clock=clock, lease_duration=timedelta(minutes=10)) as long_lease,
    ):
        await queue.enqueue(Add(1), dispatch(queue="gauged"))
        expiring = await Leases(queue).claim("gauged")
        assert expiring is not None
        await queue.enqueue(Add(2), dispatch(queue="gauged"))
        done = await Leases(queue).claim("gauged")
        assert done is not None
        await Leases(queue).complete(done.lease)
        await queue.enqueue(Add(3), dispatch(queue="gauged"))
        dead = await Leases(queue).claim("gauged")
        assert dead is not None
        assert (await Leases(queue).fail(dead.lease, "HandlerFailed")).dead_lettered
        await queue.enqueue(Add(4), dispatch(queue="gauged"))
        running = await Leases(long_lease).claim("gauged")
        assert running is not None
        await queue.enqueue(Add(5), dispatch(queue="gauged"))  # ready since T0
        await queue.enqueue(
            Add(6), dispatch(queue="gauged", not_before=from_ms(clock.now_ms() + 3_600_000))
        )
        await clock.advance(LEASE + timedelta(seconds=1))  # the first lease has expired
        await queue.enqueue(Add(7), dispatch(queue="gauged"))  # ready now
        await queue.enqueue_chain(  # one more ready now, and a held step
            [(Add(9), dispatch(queue="gauged")), (Add(10), dispatch(queue="gauged"))]
        )
        await queue.enqueue(Add(8), dispatch(queue="elsewhere"))

        (counts,) = await inspector_of(queue).queue_counts("gauged")
        expected = {
            "ready": 3,
            "delayed": 1,
            "held": 1,
            "running": 1,
            "expired": 1,
            "dead_letter": 1,
            "completed": 1,
        }
        assert {state: getattr(counts, state) for state in expected} == expected

        gauges.update(*gauge_values(await inspector_of(queue).queue_counts(), clock.now_ms()))

    depth = otel.gauge("caravel.queue.depth", {"messaging.destination.name": "gauged"})
    assert {dict(attrs)["caravel.state"]: value for attrs, value in depth.items()} == expected
    assert (
        otel.gauge_value(
            "caravel.queue.depth",
            {"messaging.destination.name": "elsewhere", "caravel.state": "ready"},
        )
        == 1
    )
    assert otel.gauge_value(
        "caravel.queue.oldest_ready_age", {"messaging.destination.name": "gauged"}
    ) == pytest.approx(31.0)
    assert otel.gauge_value(
        "caravel.queue.oldest_ready_age", {"messaging.destination.name": "elsewhere"}
    ) == pytest.approx(0.0)


async def test_a_worker_with_queue_metrics_publishes_the_gauges(
    db_url: str, otel: Telemetry
) -> None:
    clock = ManualClock()
    gauges = queue_gauges()
    gauges.update({}, {})
    where = {"messaging.destination.name": "watched"}
    async with open_queue(db_url, clock=clock) as queue:
        await queue.enqueue(Add(1), dispatch(queue="watched"))
        await queue.enqueue(Add(2), dispatch(queue="watched"))
        await clock.advance(timedelta(seconds=4))
        options = WorkerOptions(queue_metrics_interval=timedelta(seconds=1))
        async with QueueWorker(queue, options=options) as worker:
            counted = otel.next_span("caravel.store.queue_counts")
            task = asyncio.ensure_future(worker.run("idle"))  # it claims nothing from "watched"
            try:
                # The collector reads the counts as soon as the worker starts, then publishes.
                await within(counted.wait())
            finally:
                worker.stop()
                await within(task)

    depth = otel.gauge("caravel.queue.depth", where)
    assert {dict(attrs)["caravel.state"]: value for attrs, value in depth.items()} == {
        "ready": 2,
        "delayed": 0,
        "held": 0,
        "running": 0,
        "expired": 0,
        "dead_letter": 0,
        "completed": 0,
    }
    assert otel.gauge_value("caravel.queue.oldest_ready_age", where) == pytest.approx(4.0)
    assert otel.spans("caravel.store.queue_counts")


async def test_limit_gauges_report_caps_running_and_waiting_per_queue_never_per_key(
    db_url: str, otel: Telemetry
) -> None:
    clock = ManualClock()
    gauges = queue_gauges()
    gauges.update_limits({})  # forget earlier tests' snapshots
    async with open_queue(db_url, clock=clock) as queue:
        for n in range(6):
            await queue.enqueue(Add(n), dispatch(queue="capped", tenant=f"t{n % 2}"))
        await queue.enqueue(Add(9), dispatch(queue="keyed"))
        await queue.set_queue_limit(ConcurrencyLimit(queue="capped", concurrency=3, per_key=1))
        await queue.set_queue_limit(ConcurrencyLimit(queue="keyed", per_key=2))
        assert len(await Leases(queue).claim_many("capped", 10, limited=True)) == 2
        usage = await inspector_of(queue).queue_limit_usage()
        gauges.update_limits(limit_values(usage))

    capped = {"messaging.destination.name": "capped"}
    # Two run, one per key: each key's other two jobs wait.
    assert otel.gauge_value("caravel.queue.limit.running", capped) == 2
    assert (
        otel.gauge_value("caravel.queue.limit.waiting", {**capped, "caravel.limit": "concurrency"})
        == 4
    )
    caps = otel.gauge("caravel.queue.limit.max", capped)
    assert {dict(attrs)["caravel.limit"]: value for attrs, value in caps.items()} == {
        "concurrency": 3,
        "per_key": 1,
    }
    keyed = {"messaging.destination.name": "keyed"}
    assert otel.gauge_value("caravel.queue.limit.running", keyed) == 0
    assert {
        dict(attrs)["caravel.limit"]: value
        for attrs, value in otel.gauge("caravel.queue.limit.max", keyed).items()
    } == {"per_key": 2}
    # No series names a partition key: the attributes are the queue and the kind of limit.
    for name in (
        "caravel.queue.limit.max",
        "caravel.queue.limit.running",
        "caravel.queue.limit.waiting",
    ):
        for attrs in otel.gauge(name, {}):
            assert set(dict(attrs)) <= {"messaging.destination.name", "caravel.limit"}

    # A limit cleared leaves the gauges at the next snapshot.
    gauges.update_limits(limit_values(usage[1:]))
    assert otel.gauge("caravel.queue.limit.running", capped) == {}


async def test_rate_gauges_report_the_rate_and_the_weight_used_in_its_window(
    db_url: str, otel: Telemetry
) -> None:
    clock = ManualClock()
    gauges = queue_gauges()
    gauges.update_limits({})
    where = {"messaging.destination.name": "rated"}
    async with open_queue(db_url, clock=clock) as queue:
        for n in range(5):
            await queue.enqueue(Add(n), dispatch(queue="rated", tenant=f"t{n % 2}"))
        limit = RateLimit(queue="rated", rate=3, per_key=2, period=timedelta(seconds=10))
        await queue.set_queue_limit(limit)
        assert len(await Leases(queue).claim_many("rated", 10, limited=True)) == 3
        gauges.update_limits(limit_values(await inspector_of(queue).queue_limit_usage()))
        assert otel.gauge_value("caravel.queue.limit.used", {**where, "caravel.limit": "rate"}) == 3
        caps = otel.gauge("caravel.queue.limit.max", where)
        assert {dict(attrs)["caravel.limit"]: value for attrs, value in caps.items()} == {
            "rate": 3,
            "rate_per_key": 2,
        }
        # The starts leave the window one period later.
        await clock.advance(timedelta(seconds=10))
        gauges.update_limits(limit_values(await inspector_of(queue).queue_limit_usage()))
        assert otel.gauge_value("caravel.queue.limit.used", {**where, "caravel.limit": "rate"}) == 0
        # Concurrency alone publishes no rate series.
        await queue.clear_queue_limit("rated", "rate")
        await queue.set_queue_limit(ConcurrencyLimit(queue="rated", concurrency=4))
        gauges.update_limits(limit_values(await inspector_of(queue).queue_limit_usage()))
    assert otel.gauge("caravel.queue.limit.used", where) == {}
    for attrs in otel.gauge("caravel.queue.limit.used", {}):
        assert set(dict(attrs)) <= {"messaging.destination.name", "caravel.limit"}


async def test_a_worker_with_queue_metrics_publishes_the_limit_gauges(
    db_url: str, otel: Telemetry
) -> None:
    clock = ManualClock()
    queue_gauges().update_limits({})
    where = {"messaging.destination.name": "watched"}
    async with open_queue(db_url, clock=clock) as queue:
        for n in range(3):
            await queue.enqueue(Add(n), dispatch(queue="watched"))
        await queue.set_queue_limit(ConcurrencyLimit(queue="watched", concurrency=1))
        options = WorkerOptions(queue_metrics_interval=timedelta(seconds=1))
        async with QueueWorker(queue, options=options) as worker:
            read = otel.next_span("caravel.store.queue_limit_usage")
            task = asyncio.ensure_future(worker.run("idle"))  # it claims nothing from "watched"
            try:
                await within(read.wait())
            finally:
                worker.stop()
                await within(task)

    assert otel.gauge_value("caravel.queue.limit.running", where) == 0
    # One of the three could start; two wait.
    waiting = {**where, "caravel.limit": "concurrency"}
    assert otel.gauge_value("caravel.queue.limit.waiting", waiting) == 2


# ----- the outbox ---------------------------------------------------------------------------

outbox_metadata = sa.MetaData()
Envelope = add_outbox(outbox_metadata)


@pytest.fixture
def app_url(backend: str, tmp_path: Path) -> Iterator[str]:
    """An application database holding the outbox table, on the queue's backend."""
    url = create_database_like(f"{backend}://", tmp_path)
    engine = sa.create_engine(sync_url(url), poolclass=sa.pool.NullPool)
    try:
        outbox_metadata.create_all(engine)
        yield url
    finally:
        engine.dispose()
        drop_database(url)


@contextmanager
def app_session(url: str) -> Iterator[Session]:
    engine = sa.create_engine(sync_url(url), poolclass=sa.pool.NullPool)
    try:
        with Session(engine) as session:
            yield session
    finally:
        engine.dispose()


@asynccontextmanager
async def relay_for(app: str, queue: DatabaseQueue, **options: Any) -> AsyncIterator[OutboxRelay]:
    relay = OutboxRelay(app, queue, **options)
    try:
        yield relay
    finally:
        await relay.close()


async def test_outbox_metrics_and_the_staging_request_trace(
    db_url: str, app_url: str, otel: Telemetry
) -> None:
    clock = ManualClock()
    box = Outbox(registry_for(), Envelope, clock=clock)
    with app_session(app_url) as session, app_tracer.start_as_current_span("request") as request:
        first = box.stage(session, Add(1), dispatch("k1"))
        second = box.stage(session, Add(2), dispatch())
        session.commit()
    request_ctx = request.get_span_context()
    q = {"messaging.destination.name": "default", "caravel.job.type": "tests.add.v1"}
    assert otel.delta("caravel.outbox.staged", q) == 2
    table = {"caravel.outbox.table": "caravel_outbox"}

    async with (
        open_queue(db_url, clock=clock) as queue,
        QueueWorker(queue) as worker,
        relay_for(app_url, queue, batch_size=1) as relay,
    ):
        assert await relay.run_once() == 1
        assert otel.delta("caravel.outbox.dispatched", q) == 1
        assert otel.gauge_value("caravel.outbox.pending", table) == 1
        assert await relay.run_once() == 1
        assert otel.delta("caravel.outbox.dispatched", q) == 2
        assert otel.gauge_value("caravel.outbox.pending", table) == 0
        assert await relay.run_once() == 0
        assert otel.delta("caravel.outbox.dispatched", q) == 2
        assert otel.gauge_value("caravel.outbox.pending", table) == 0
        assert otel.delta("caravel.outbox.undeliverable") == 0
        assert otel.delta("caravel.jobs.enqueued", q) == 2

        dispatches = otel.spans("caravel.outbox.dispatch")
        assert len(dispatches) == 2
        for span in dispatches:
            assert span.kind is SpanKind.PRODUCER
            assert dict(span.attributes or {}) == {
                "messaging.system": "caravel",
                "messaging.batch.message_count": 1,
            }
        sends = otel.spans("send default")
        assert {(s.parent.span_id if s.parent else None) for s in sends} == {
            s.context.span_id for s in dispatches
        }
        assert {(s.attributes or {})["messaging.message.id"] for s in sends} == {
            str(first.outbox_id),
            str(second.outbox_id),
        }

        # The jobs continue the trace of the request that staged them.
        for staged in (first, second):
            carrier = await stored_trace_context(queue, staged.outbox_id)
            assert carrier is not None
            assert traceparent_of(carrier) == (hex_trace(request_ctx), hex_span(request_ctx), True)
        assert await worker.run_once("default") is True
        assert await worker.run_once("default") is True

    processes = otel.spans("process default")
    assert len(processes) == 2
    for span in processes:
        assert span.context.trace_id == request_ctx.trace_id
        assert span.parent is not None
        assert span.parent.span_id == request_ctx.span_id


async def test_an_undeliverable_intent_is_counted_and_stays_pending(
    db_url: str, app_url: str, otel: Telemetry
) -> None:
    box = Outbox(registry_for(), Envelope)
    with app_session(app_url) as session:
        stuck = box.stage(session, Add(1), dispatch())
        box.stage(session, Add(2), dispatch())
        session.commit()
        session.execute(
            sa.update(Envelope)
            .where(Envelope.id == stuck.outbox_id)
            .values(job_type="tests.gone.v1")
        )
        session.commit()
    async with open_queue(db_url) as queue, relay_for(app_url, queue) as relay:
        assert await relay.run_once() == 1
    assert (
        otel.delta(
            "caravel.outbox.undeliverable",
            {"messaging.destination.name": "default", "caravel.reason": "UnknownJobType"},
        )
        == 1
    )
    assert otel.delta("caravel.outbox.dispatched", {"messaging.destination.name": "default"}) == 1
    assert (
        otel.gauge_value("caravel.outbox.pending", {"caravel.outbox.table": "caravel_outbox"}) == 1
    )


async def test_the_failure_of_an_unknown_job_type_is_described_by_category(
    db_url: str, otel: Telemetry
) -> None:
    async with open_queue(db_url) as producer:
        await producer.enqueue(Report(report_id="r"), dispatch())
    async with open_queue(db_url, registry_for()) as queue, QueueWorker(queue) as worker:
        assert await worker.run_once("default") is True
    process = otel.one("process default")
    assert (process.attributes or {})["error.type"] == "UnknownJobType"
    assert (process.attributes or {})["caravel.failure.category"] == "UnknownJobType"
    assert process.status.status_code is StatusCode.ERROR
    assert process.status.description is None


# ----- without an SDK -----------------------------------------------------------------------


async def test_without_an_sdk_nothing_records_and_nothing_accumulates(
    sqlite_template: SqliteTemplate, tmp_path: Path
) -> None:
    url = sqlite_template.copy_to(tmp_path / "untraced.db")
    result = await asyncio.to_thread(
        run_app,
        "tests.support.apps.untraced_cycles",
        {"CARAVEL_TEST_URL": url, "CARAVEL_TEST_CYCLES": "200"},
    )
    assert result["sdk_imported"] == []
    assert result["tracer_provider"] == "ProxyTracerProvider"
    assert result["meter_provider"] == "_ProxyMeterProvider"
    assert result["claimed"] == 200
    assert result["observed"] == [{"recording": False, "valid": False, "jobs": 200}]

    # The measurement does see telemetry.py's allocations (while a job runs)...
    assert result["telemetry_file"] == str(ROOT / "src" / "caravel" / "telemetry.py")
    assert result["during_job"]["bytes"] > 0
    # ...and none of them outlives the cycles: no growth over the second hundred. (A few blocks
    # may stay traced to the module without being live: CPython keeps freed dicts and floats on
    # free lists, still attributed to the line that allocated them. A leak of even one small
    # object per cycle would add a hundred blocks.)
    start, half, end = result["memory"]
    assert end["bytes"] - half["bytes"] <= 1024, result["memory"]
    assert end["blocks"] - half["blocks"] <= 8, result["memory"]
    assert half["bytes"] - start["bytes"] <= 1024, result["memory"]

    conn = sqlite3.connect(str(tmp_path / "untraced.db"))
    try:
        rows = conn.execute("SELECT state, trace_context FROM caravel_jobs").fetchall()
    finally:
        conn.close()
    assert len(rows) == 200
    assert {trace_context for _, trace_context in rows} == {None}  # nothing to carry
    assert {state for state, _ in rows} == {"completed"}


async def test_a_snooze_is_its_own_outcome_and_a_discard_a_dead_letter(
    db_url: str, otel: Telemetry
) -> None:
    from caravel import Discard, Snooze

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        if job.amount == 1:
            raise Snooze(timedelta(hours=1))
        raise Discard("NotWanted")

    q = {"messaging.destination.name": "metered"}
    async with open_queue(db_url, registry_for(handle)) as queue:
        await queue.enqueue(Add(1), dispatch(queue="metered"))
        await queue.enqueue(Add(2), dispatch(queue="metered", max_attempts=3))
        runs = await drain(queue, queues=["metered"])
        assert sorted(run.outcome for run in runs) == ["dead_letter", "snoozed"]
    assert otel.delta("caravel.job.duration", {**q, "caravel.outcome": "snoozed"}) == 1
    assert otel.delta("caravel.jobs.completed", q) == 0
    assert otel.delta("caravel.jobs.failed", {**q, "caravel.failure.category": "NotWanted"}) == 1
    assert (
        otel.delta("caravel.jobs.dead_lettered", {**q, "caravel.failure.category": "NotWanted"})
        == 1
    )
    assert otel.spans("caravel.store.job_snooze")


async def test_a_workflow_is_one_trace_its_steps_continue(store_url: str, otel: Telemetry) -> None:
    """The workflow's root span and one producer span per step (a group is one step), every
    run in the request's trace (the spans' links and parents: test_workflow_spans.py)."""
    q = {"messaging.destination.name": "default", "caravel.job.type": "tests.add.v1"}
    async with open_queue(store_url) as queue, QueueWorker(queue) as worker:
        with app_tracer.start_as_current_span("request") as request:
            wf = Workflow(tenant_id="tenant-a")
            wf.add_many("parts", [Add(1), Add(2)])
            wf.add("sum", Add(3), after=["parts"])
            made = await queue.enqueue_workflow(wf)
        assert otel.spans("send default") == []
        root = otel.one("caravel.workflow")
        assert (root.attributes or {})["messaging.batch.message_count"] == 3
        steps = otel.spans("caravel.workflow.step")
        assert sorted((s.attributes or {})["caravel.workflow.step"] for s in steps) == [
            "parts",
            "sum",
        ]
        assert otel.delta("caravel.jobs.enqueued", {**q, "caravel.already_enqueued": False}) == 3
        for _ in range(3):
            assert await worker.run_once("default") is True
        assert await worker.run_once("default") is False
    processes = otel.spans("process default")
    ran = {(s.attributes or {})["messaging.message.id"] for s in processes}
    assert ran == {str(i) for ids in made.step_ids.values() for i in ids}
    for span in processes:
        assert span.context.trace_id == request.get_span_context().trace_id
