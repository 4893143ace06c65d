"""A workflow is one trace: a root span ``caravel.workflow``, a ``caravel.workflow.step`` span per
step (a group of ``add_many`` members is one step) linked to the steps it runs after, and every
step's jobs carrying their step span's context, so a run of a step is a child of its span.

Read with the OpenTelemetry SDK's in-memory exporter (``conftest.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from uuid import UUID, uuid4

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from caravel.store.urls import async_url
from caravel.store.values import NewJob
from caravel.store.workflows.records import NewStep, NewWorkflow
from caravel.store.workflows.traces import traced_workflow
from tests.support.databases import SqliteTemplate
from tests.support.telemetry import Telemetry, span_texts

SECRET = "s3cr3t-payload-value"


def _job(queue: str) -> NewJob:
    return NewJob(uuid4(), queue, "app.Work", "tenant-x", None, json.dumps({"p": SECRET}), 3, 0, 0)


def _diamond_with_a_group(members: int = 3) -> NewWorkflow:
    """fetch -> resize[0..members-1] (a group) -> merge, and fetch -> audit -> merge."""
    fetch = NewStep(_job("io"), "fetch", None, ())
    group = [NewStep(_job("cpu"), "resize", i, (fetch.job.id,)) for i in range(members)]
    audit = NewStep(_job("io"), "audit", None, (fetch.job.id,))
    merge = NewStep(
        _job("io"), "merge", None, (*(g.job.id for g in group), audit.job.id), wait_signal="ok"
    )
    return NewWorkflow(
        uuid4(),
        "tenant-x",
        "thumbnails",
        "key-1",
        "0" * 64,
        0,
        [
            merge,  # any order: a step's span still opens after its dependencies'
            *group,
            fetch,
            audit,
        ],
    )


def _parent_of(carrier: str | None) -> trace.SpanContext:
    from opentelemetry import propagate

    assert carrier is not None
    return trace.get_current_span(propagate.extract(json.loads(carrier))).get_span_context()


def _by_step(otel: Telemetry) -> dict[str, ReadableSpan]:
    return {
        str((s.attributes or {})["caravel.workflow.step"]): s
        for s in otel.spans("caravel.workflow.step")
    }


def test_one_root_one_span_per_step_linked_to_its_dependencies(otel: Telemetry) -> None:
    workflow = _diamond_with_a_group()
    workflow_id = UUID(int=7)
    with traced_workflow(workflow) as traced:
        traced.inserted(workflow_id, True)
    root = otel.one("caravel.workflow")
    assert root.kind is SpanKind.INTERNAL
    assert root.attributes == {
        "messaging.system": "caravel",
        "caravel.workflow.id": str(workflow_id),
        "caravel.workflow.name": "thumbnails",
        "caravel.workflow.steps": 4,
        "messaging.batch.message_count": 6,
        "caravel.already_enqueued": False,
    }
    steps = _by_step(otel)
    assert set(steps) == {"fetch", "resize", "audit", "merge"}
    trace_id = root.context.trace_id
    for span in steps.values():
        assert span.kind is SpanKind.PRODUCER
        assert span.context.trace_id == trace_id
        assert span.parent is not None
        assert span.parent.span_id == root.context.span_id

    def linked(name: str) -> set[str]:
        return {str((link.attributes or {})["caravel.workflow.step"]) for link in steps[name].links}

    assert linked("fetch") == set()
    assert linked("resize") == {"fetch"}
    assert linked("merge") == {"resize", "audit"}
    # Each link points at the dependency's own span.
    for link in steps["merge"].links:
        name = str((link.attributes or {})["caravel.workflow.step"])
        assert link.context.span_id == steps[name].context.span_id
    # A group is one span with its count; a single step names its job.
    assert steps["resize"].attributes is not None
    assert steps["resize"].attributes["messaging.batch.message_count"] == 3
    assert "messaging.message.id" not in steps["resize"].attributes
    fetch_job = next(s.job.id for s in workflow.steps if s.step == "fetch")
    assert steps["fetch"].attributes is not None
    assert steps["fetch"].attributes["messaging.message.id"] == str(fetch_job)
    assert steps["fetch"].attributes["messaging.destination.name"] == "io"


def test_every_job_carries_its_step_spans_context(otel: Telemetry) -> None:
    workflow = _diamond_with_a_group()
    with traced_workflow(workflow) as traced:
        carried = traced.workflow
    steps = _by_step(otel)
    assert [s.job.id for s in carried.steps] == [s.job.id for s in workflow.steps]
    for one in carried.steps:
        parent = _parent_of(one.job.trace_context)
        assert parent.span_id == steps[one.step].context.span_id
        assert parent.trace_id == steps[one.step].context.trace_id


def test_the_root_is_a_child_of_the_callers_span(otel: Telemetry) -> None:
    tracer = trace.get_tracer("test")
    with (
        tracer.start_as_current_span("request") as request,
        traced_workflow(_diamond_with_a_group()),
    ):
        pass
    root = otel.one("caravel.workflow")
    assert root.parent is not None
    assert root.parent.span_id == request.get_span_context().span_id


def test_an_idempotent_repeat_says_so_and_names_the_stored_workflow(otel: Telemetry) -> None:
    original = UUID(int=42)
    with traced_workflow(_diamond_with_a_group()) as traced:
        traced.inserted(original, False)
    root = otel.one("caravel.workflow")
    assert root.attributes is not None
    assert root.attributes["caravel.workflow.id"] == str(original)
    assert root.attributes["caravel.already_enqueued"] is True


def test_a_ten_thousand_member_fan_in_has_one_link(otel: Telemetry) -> None:
    workflow = _diamond_with_a_group(members=10_000)
    with traced_workflow(workflow):
        pass
    steps = _by_step(otel)
    assert len(otel.spans("caravel.workflow.step")) == 4
    assert len(steps["merge"].links) == 2


def test_no_payload_tenant_or_key_becomes_telemetry(otel: Telemetry) -> None:
    with traced_workflow(_diamond_with_a_group()):
        pass
    texts = [
        text
        for span in otel.spans()
        for where, text in span_texts(span)
        if not where.startswith("resource")
    ]
    assert texts
    for text in texts:
        assert SECRET not in text
        assert "tenant-x" not in text
        assert "key-1" not in text


async def test_each_run_of_a_step_is_a_child_of_its_step_span(otel: Telemetry) -> None:
    """End to end on the memory store: enqueue a workflow inside a request's span, run every
    step, and find one trace: request -> workflow -> steps -> their runs."""
    from caravel import QueueWorker, Workflow
    from tests.support import Add, open_queue

    tracer = trace.get_tracer("test")
    async with open_queue("memory://") as queue, QueueWorker(queue) as worker:
        workflow = Workflow("fan")
        workflow.add("fetch", Add(1))
        workflow.add_many("resize", [Add(i) for i in range(3)], after=["fetch"])
        workflow.add("merge", Add(9), after=["resize"])
        with tracer.start_as_current_span("request") as request:
            enqueued = await queue.enqueue_workflow(workflow)
        while await worker.run_once("default"):
            pass
    trace_id = request.get_span_context().trace_id
    root = otel.one("caravel.workflow")
    assert root.context.trace_id == trace_id
    assert (root.attributes or {})["caravel.workflow.id"] == str(enqueued.workflow_id)
    steps = _by_step(otel)
    job_step = {job_id: name for name, ids in enqueued.step_ids.items() for job_id in ids}
    runs = otel.spans("process default")
    assert len(runs) == 5
    for run in runs:
        name = job_step[UUID(str((run.attributes or {})["messaging.message.id"]))]
        assert run.context.trace_id == trace_id
        assert run.parent is not None
        assert run.parent.span_id == steps[name].context.span_id


async def test_a_workflow_saved_in_the_callers_transaction_is_one_trace_too(
    otel: Telemetry, tmp_path: Path, sqlite_template: SqliteTemplate
) -> None:
    """``enqueue_workflow(session=...)``: the same root and step spans, the steps' jobs
    carrying their step's context once the caller's transaction commits."""
    from caravel import Workflow
    from tests.support import Add, open_queue

    url = sqlite_template.copy_to(tmp_path / "queue.db")
    workflow = Workflow("joined")
    workflow.add("first", Add(1))
    workflow.add("second", Add(2), after=["first"])
    engine = create_async_engine(async_url(url))
    try:
        async with open_queue(url) as queue, AsyncSession(engine) as session:
            made = await queue.enqueue_workflow(workflow, session=session)
            await session.commit()
            status = await queue.get_workflow(made.workflow_id)
    finally:
        await engine.dispose()
    assert status is not None
    root = otel.one("caravel.workflow")
    assert (root.attributes or {})["caravel.workflow.id"] == str(made.workflow_id)
    steps = _by_step(otel)
    assert {link.context.span_id for link in steps["second"].links} == {
        steps["first"].context.span_id
    }
    assert otel.spans("caravel.store.workflow_insert_joined")
