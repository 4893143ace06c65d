"""The served backend's telemetry: Prometheus metrics at ``GET /metrics`` for operators, and
traces over OTLP when the standard OpenTelemetry variables ask for them.

Caravel itself only speaks the OpenTelemetry API; this is where an application installs the SDK.
:func:`install` runs once per process, from ``serve`` (never from :func:`create_app`, so tests
and embedding applications keep their own providers). It installs a meter provider whose
Prometheus reader answers ``/metrics``; and, when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set, a tracer provider that batches spans to that
collector over OTLP/HTTP (the exporter reads the rest of the ``OTEL_EXPORTER_OTLP_*`` settings
itself). ``OTEL_SERVICE_NAME`` names the service (``caravel-backend`` by default).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Annotated

from caravel_samples.backend.accounts import User
from caravel_samples.backend.guards import SignedInRoute, current_user
from caravel_samples.backend.models import Problem
from fastapi import APIRouter, Depends, HTTPException, Response
from opentelemetry import metrics, trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

__all__ = ["METRICS_PERMISSION", "install", "otlp_configured", "router"]

METRICS_PERMISSION = "metrics.read"
OTLP_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")

_installed = False


def otlp_configured(environ: Mapping[str, str]) -> bool:
    """Whether the environment names an OTLP collector for traces."""
    return any(environ.get(name, "").strip() for name in OTLP_VARIABLES)


def install(environ: Mapping[str, str] = os.environ) -> None:
    """Install the SDK's providers for this process (once; later calls do nothing)."""
    global _installed
    if _installed:
        return
    resource = Resource.create(
        {"service.name": environ.get("OTEL_SERVICE_NAME") or "caravel-backend"}
    )
    metrics.set_meter_provider(
        MeterProvider(resource=resource, metric_readers=[PrometheusMetricReader()])
    )
    if otlp_configured(environ):
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(provider)
    _installed = True


router = APIRouter(tags=["monitoring"], route_class=SignedInRoute)


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {
            "content": {CONTENT_TYPE_LATEST.split(";")[0]: {}},
            "description": "Every metric of this process in the Prometheus text format",
        },
        403: {"model": Problem, "description": "The account lacks metrics.read"},
    },
)
async def prometheus_metrics(user: Annotated[User, Depends(current_user)]) -> Response:
    """This process's metrics (Caravel's queue metrics among them), for operators."""
    if METRICS_PERMISSION not in user.permissions:
        raise HTTPException(403, f"the {METRICS_PERMISSION} permission is required")
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)
