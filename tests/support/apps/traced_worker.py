"""A worker process with the OpenTelemetry SDK configured, for the telemetry tests.

Run as ``python -m tests.support.apps.traced_worker``. It installs an SDK tracer provider whose
exporter appends every finished span as one JSON line to the file named by
``CARAVEL_TEST_SPANS``, then runs ``QueueWorker.run_once`` on the queue ``CARAVEL_TEST_QUEUE``
(default ``default``) of the database at ``CARAVEL_TEST_URL``, and prints one JSON object:
whether a job was claimed and the trace context each handler saw as current.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from caravel import DatabaseQueue, JobContext, JobRegistry, QueueWorker
from tests.support import Add, Report


def span_record(span: ReadableSpan) -> dict[str, Any]:
    """A finished span as plain JSON: ids in W3C hex."""
    context = span.get_span_context()
    assert context is not None
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_span_id": None if span.parent is None else f"{span.parent.span_id:016x}",
        "parent_trace_id": None if span.parent is None else f"{span.parent.trace_id:032x}",
        "attributes": {key: value for key, value in (span.attributes or {}).items()},
        "links": [
            {"trace_id": f"{link.context.trace_id:032x}", "span_id": f"{link.context.span_id:016x}"}
            for link in span.links
        ],
        "events": [event.name for event in span.events],
        "status": {"code": span.status.status_code.name, "description": span.status.description},
        "resource": dict(span.resource.attributes),
    }


class JsonLinesExporter(SpanExporter):
    """Appends each finished span to a file as a JSON line."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self.path.open("a", encoding="utf-8") as out:
            for span in spans:
                out.write(json.dumps(span_record(span), default=list) + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


seen: list[dict[str, Any]] = []


def _see(ctx: JobContext[object]) -> None:
    current = trace.get_current_span()
    context = current.get_span_context()
    seen.append(
        {
            "job_id": str(ctx.job_id),
            "recording": current.is_recording(),
            "trace_id": f"{context.trace_id:032x}",
            "span_id": f"{context.span_id:016x}",
        }
    )


async def add(job: Add, ctx: JobContext[object]) -> None:
    _see(ctx)


def report(job: Report, ctx: JobContext[object]) -> None:
    _see(ctx)


async def main() -> int:
    registry = JobRegistry()
    registry.register("tests.add.v1", Add, add)
    registry.register("tests.report.v1", Report, report)
    queue = DatabaseQueue(os.environ["CARAVEL_TEST_URL"], registry)
    async with queue, QueueWorker(queue) as worker:
        ran = await worker.run_once(os.environ.get("CARAVEL_TEST_QUEUE", "default"))
    print(json.dumps({"ran": ran, "seen": seen}))
    return 0


if __name__ == "__main__":
    provider = TracerProvider(resource=Resource.create({"service.name": "traced-worker"}))
    provider.add_span_processor(
        SimpleSpanProcessor(JsonLinesExporter(Path(os.environ["CARAVEL_TEST_SPANS"])))
    )
    trace.set_tracer_provider(provider)
    try:
        code = asyncio.run(main())
    finally:
        provider.shutdown()
    sys.exit(code)
