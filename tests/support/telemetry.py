"""OpenTelemetry's SDK for the tests of ``tests/integration/telemetry``: installed once per
process (its providers can be installed only once), an in-memory exporter behind a gate and an
in-memory metric reader; :class:`Telemetry` reads what one test produced, and
:func:`span_texts` and :func:`metric_texts` list every text a span or metric exports."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import Histogram, InMemoryMetricReader, MetricsData
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

__all__ = [
    "Attrs",
    "GatedProcessor",
    "Point",
    "Sdk",
    "Telemetry",
    "install_sdk",
    "metric_texts",
    "read_points",
    "span_texts",
]


class GatedProcessor(SimpleSpanProcessor):
    """Exports finished spans only while a test of ``tests/integration/telemetry`` runs, so the
    spans of other tests (the providers stay installed for the rest of the session) do not pile
    up."""

    def __init__(self, exporter: InMemorySpanExporter) -> None:
        super().__init__(exporter)
        self.open = False
        self.waiters: dict[str, asyncio.Event] = {}

    def on_end(self, span: ReadableSpan) -> None:
        if self.open:
            super().on_end(span)
            waiter = self.waiters.pop(span.name, None)
            if waiter is not None:
                waiter.set()


@dataclass
class Sdk:
    exporter: InMemorySpanExporter
    processor: GatedProcessor
    reader: InMemoryMetricReader
    resource: Resource


Attrs = Mapping[str, Any]


@dataclass(frozen=True)
class Point:
    value: float  # a sum's or gauge's value; a histogram's count
    total: float = 0.0  # a histogram's sum


def read_points(data: MetricsData | None) -> dict[tuple[str, frozenset[tuple[str, Any]]], Point]:
    points: dict[tuple[str, frozenset[tuple[str, Any]]], Point] = {}
    if data is None:
        return points
    for resource_metrics in data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                histogram = isinstance(metric.data, Histogram)
                for p in metric.data.data_points:
                    key = (metric.name, frozenset((p.attributes or {}).items()))
                    if histogram:
                        points[key] = Point(p.count, p.sum)  # type: ignore[union-attr]
                    else:
                        points[key] = Point(p.value)  # type: ignore[union-attr]
    return points


@dataclass
class Telemetry:
    """What the SDK saw during one test."""

    sdk: Sdk
    baseline: dict[tuple[str, frozenset[tuple[str, Any]]], Point] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.baseline = read_points(self.sdk.reader.get_metrics_data())

    # spans

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        finished = list(self.sdk.exporter.get_finished_spans())
        return [s for s in finished if name is None or s.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.spans(name)
        assert len(found) == 1, (name, [s.name for s in self.spans()])
        return found[0]

    def clear_spans(self) -> None:
        self.sdk.exporter.clear()

    def next_span(self, name: str) -> asyncio.Event:
        """An event set when the next span called ``name`` ends (in this event loop's thread)."""
        event = self.sdk.processor.waiters[name] = asyncio.Event()
        return event

    # metrics

    def metrics_data(self) -> MetricsData | None:
        return self.sdk.reader.get_metrics_data()

    def _matching(
        self,
        points: Mapping[tuple[str, frozenset[tuple[str, Any]]], Point],
        name: str,
        where: Attrs,
    ) -> dict[frozenset[tuple[str, Any]], Point]:
        return {
            attrs: point
            for (metric, attrs), point in points.items()
            if metric == name and all((k, v) in attrs for k, v in where.items())
        }

    def delta(self, name: str, where: Attrs | None = None) -> float:
        """The increase of a counter (or of a histogram's count) since the test started, over
        every series whose attributes include ``where``."""
        now = self._matching(read_points(self.metrics_data()), name, where or {})
        before = self._matching(self.baseline, name, where or {})
        return sum(p.value - before.get(a, Point(0)).value for a, p in now.items())

    def delta_sum(self, name: str, where: Attrs | None = None) -> float:
        """The increase of a histogram's sum since the test started."""
        now = self._matching(read_points(self.metrics_data()), name, where or {})
        before = self._matching(self.baseline, name, where or {})
        return sum(p.total - before.get(a, Point(0)).total for a, p in now.items())

    def gauge(
        self, name: str, where: Attrs | None = None
    ) -> dict[frozenset[tuple[str, Any]], float]:
        """The current observations of a gauge, by attribute set."""
        now = self._matching(read_points(self.metrics_data()), name, where or {})
        return {attrs: point.value for attrs, point in now.items()}

    def gauge_value(self, name: str, where: Attrs) -> float:
        found = self.gauge(name, where)
        assert len(found) == 1, (name, where, found)
        return next(iter(found.values()))


def install_sdk() -> Sdk:
    """Install the SDK's providers in this process (possible once) and return them."""
    resource = Resource.create({"service.name": "caravel-telemetry-tests"})
    exporter = InMemorySpanExporter()
    processor = GatedProcessor(exporter)
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(processor)
    trace.set_tracer_provider(tracer_provider)
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
    metrics.set_meter_provider(meter_provider)
    if trace.get_tracer_provider() is not tracer_provider:
        pytest.fail("another tracer provider was installed in this process first", pytrace=False)
    if metrics.get_meter_provider() is not meter_provider:
        pytest.fail("another meter provider was installed in this process first", pytrace=False)
    return Sdk(exporter, processor, reader, resource)


def span_texts(span: ReadableSpan) -> Iterator[tuple[str, str]]:
    """Every piece of text a span exports, labelled by where it sits."""
    yield "name", span.name
    for key, value in (span.attributes or {}).items():
        yield f"attribute key {key}", key
        yield f"attribute {key}", str(value)
    for event in span.events:
        yield "event name", event.name
        for key, value in (event.attributes or {}).items():
            yield f"event attribute {key}", key + "=" + str(value)
    for link in span.links:
        for key, value in (link.attributes or {}).items():
            yield f"link attribute {key}", key + "=" + str(value)
    yield "status description", str(span.status.description)
    for key, value in span.resource.attributes.items():
        yield f"resource {key}", key + "=" + str(value)
    yield "scope", str(span.instrumentation_scope)


def metric_texts(data: MetricsData | None) -> Iterator[tuple[str, str]]:
    assert data is not None
    for resource_metrics in data.resource_metrics:
        for key, value in resource_metrics.resource.attributes.items():
            yield f"resource {key}", key + "=" + str(value)
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                yield "metric name", metric.name
                for point in metric.data.data_points:
                    for key, value in (point.attributes or {}).items():
                        yield f"{metric.name} attribute {key}", key + "=" + str(value)
