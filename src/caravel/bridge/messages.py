"""What crosses between Caravel and a message broker, whichever broker it is.

A message's body is the job's payload as the queue stores it: canonical JSON, UTF-8. Everything
else Caravel knows about a job travels in headers named below, as plain strings, so a consumer
in any language can read them. The broker's own message id carries the id a bridge dedupes by.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "CONTENT_TYPE",
    "HEADER_JOB_TYPE",
    "HEADER_QUEUE",
    "HEADER_TENANT",
    "HEADER_TRACEPARENT",
    "HEADER_TRACESTATE",
    "Destination",
    "IncomingMessage",
    "OutgoingMessage",
]

#: The tenant the job belongs to.
HEADER_TENANT = "caravel-tenant"
#: The job type's wire name (``reports.generate.v1``); on ingress, looked up in the registry.
HEADER_JOB_TYPE = "caravel-job-type"
#: The queue the intent was staged for (egress only; ingress queues come from its routes).
HEADER_QUEUE = "caravel-queue"
#: W3C trace context, so a trace continues across the broker.
HEADER_TRACEPARENT = "traceparent"
HEADER_TRACESTATE = "tracestate"
#: Every body Caravel publishes is JSON.
CONTENT_TYPE = "application/json"


@dataclass(frozen=True, slots=True)
class Destination:
    """Where a message goes. ``key`` is the RabbitMQ routing key or the NATS subject;
    ``exchange`` is the RabbitMQ exchange (empty: the default exchange, which routes by queue
    name). The NATS adapter publishes to ``key`` and refuses an ``exchange``."""

    key: str
    exchange: str = ""


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    """One message to publish. ``message_id`` is stable across re-sends of the same intent (the
    outbox envelope's id), so a consumer or the broker's own dedupe can drop a repeat."""

    message_id: str
    destination: Destination
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)
    content_type: str = CONTENT_TYPE


@dataclass(frozen=True, slots=True)
class IncomingMessage:
    """One message as a broker delivered it. ``message_id`` is ``None`` when the publisher set
    none; ``source`` is the routing key or subject it was published under; ``redelivered`` is
    the broker's hint that it was delivered before (never relied on: the idempotency key is)."""

    message_id: str | None
    body: bytes
    headers: Mapping[str, str]
    source: str
    redelivered: bool = False
