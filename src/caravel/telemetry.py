"""OpenTelemetry traces and metrics: every instrument, span name and attribute, in this one leaf
module.

Caravel depends only on ``opentelemetry-api``. Without an SDK configured, every tracer, span and
instrument below is the API's no-op, and attribute work is skipped for spans that do not record.
Names, attributes and units are public API; ``docs/telemetry.md`` lists them.

This module imports nothing of Caravel's but its limits, and every function takes plain values
(queue names, counts, type names), so any layer may call it. Instrumentation is applied at the
seams, once: :class:`~caravel.store.instrumented.InstrumentedStore` wraps every store operation,
:func:`job_span` wraps every job execution, and the worker, lease watchdog and outbox call the
``record_*`` helpers with the outcome they already computed. Payloads, tenant ids, idempotency
keys and exception messages never become attributes; an exception is described by its type name
and Caravel's failure category only.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any
from uuid import UUID

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.trace import INVALID_SPAN, Link, Span, SpanKind, Status, StatusCode

from caravel.limits import MAX_TRACE_CONTEXT_LENGTH

__all__ = [
    "Span",
    "WorkflowStepSpan",
    "WorkflowTrace",
    "carrier_for_current_context",
    "enqueue_span",
    "job_span",
    "mark_attempt",
    "mark_failure",
    "record_claimed",
    "record_dead_lettered",
    "record_dispatched",
    "record_enqueued",
    "record_hook_failure",
    "record_lease_lost",
    "record_outcome",
    "record_renewal",
    "record_replayed",
    "record_staged",
    "record_stuck",
    "record_undeliverable",
    "relay_span",
    "store_span",
    "tracing",
    "workflow_trace",
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
stuck_jobs = meter.create_counter(
    "caravel.jobs.stuck",
    unit="{job}",
    description="Handlers still running past their timeout plus the grace",
)
hook_failures = meter.create_counter(
    "caravel.hooks.failed",
    unit="{call}",
    description="Alert hook calls that raised, timed out or were dropped",
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


def tracing() -> bool:
    """Whether a tracer provider is installed. Without one every span would be the API's no-op
    span, and the hot paths (a span per job and per store operation) should cost nothing."""
    return not isinstance(trace.get_tracer_provider(), _NO_PROVIDER)


def _traced(name: str, **options: Any) -> AbstractContextManager[Span]:
    """``tracer.start_as_current_span``, except that without a tracer provider nothing is
    started at all."""
    if not tracing():
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
    from opentelemetry import propagate  # loads the configured propagators: only when tracing

    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    text = json.dumps(carrier, separators=(",", ":"), sort_keys=True)
    return text if len(text) <= MAX_TRACE_CONTEXT_LENGTH else None


def _carrier_of(span: Span) -> str | None:
    """``span``'s context as a job's trace-context carrier (as
    :func:`carrier_for_current_context` makes it), without making it current."""
    if not span.get_span_context().is_valid:
        return None
    from opentelemetry import propagate

    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=trace.set_span_in_context(span))
    text = json.dumps(carrier, separators=(",", ":"), sort_keys=True)
    return text if len(text) <= MAX_TRACE_CONTEXT_LENGTH else None


def _context_from(carrier: str | None) -> otel_context.Context | None:
    if not carrier:
        return None
    try:
        values = json.loads(carrier)
    except ValueError:
        return None
    if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
        return None
    from opentelemetry import propagate  # loads the configured propagators: only when tracing

    return propagate.extract(values)


@contextmanager
def enqueue_span(queue: str, count: int) -> Iterator[Span]:
    """A producer span around an enqueue of ``count`` jobs (the first of them to ``queue``);
    inside it, jobs carry its context."""
    with _traced(f"send {queue}", kind=SpanKind.PRODUCER) as span:
        if span.is_recording():
            span.set_attributes({**_base(queue), "messaging.operation.type": "send"})
            if count != 1:
                span.set_attribute("messaging.batch.message_count", count)
        yield span


def store_span(db_system: str, operation: str) -> AbstractContextManager[Span]:
    """A client span around one store operation."""
    if not tracing():
        return nullcontext(INVALID_SPAN)
    return _store_span(db_system, operation)


@contextmanager
def _store_span(db_system: str, operation: str) -> Iterator[Span]:
    with tracer.start_as_current_span(f"caravel.store.{operation}", kind=SpanKind.CLIENT) as span:
        if span.is_recording():
            span.set_attributes({"db.system.name": db_system, "db.operation.name": operation})
        yield span


class _InFlight:
    """A job's run: counted in flight while it lasts, around its span when tracing. A class,
    not a generator, since the worker enters one per job and, untraced, this is all it does."""

    __slots__ = ("_labels", "_span")

    def __init__(self, queue: str, span: AbstractContextManager[Span] | None) -> None:
        self._labels = {"messaging.destination.name": queue}
        self._span = span

    def __enter__(self) -> Span:
        span = INVALID_SPAN if self._span is None else self._span.__enter__()
        in_flight.add(1, self._labels)
        return span

    def __exit__(self, *exc_info: Any) -> bool | None:
        in_flight.add(-1, self._labels)
        return None if self._span is None else self._span.__exit__(*exc_info)


def job_span(
    *,
    queue: str,
    job_type: str,
    job_id: UUID,
    attempt: int,
    due_at_ms: int,
    trace_context: str | None,
    now_ms: int,
) -> AbstractContextManager[Span]:
    """A consumer span around one job execution, continuing the trace that enqueued it, plus
    the queue-wait and in-flight metrics. (A plain context manager: it never awaits.)"""
    labels = {"messaging.destination.name": queue, "caravel.job.type": job_type}
    queue_wait.record(max(0, now_ms - due_at_ms) / 1000, labels)
    if not tracing():
        return _InFlight(queue, None)
    return _InFlight(queue, _consumer_span(queue, job_type, job_id, attempt, trace_context))


@contextmanager
def _consumer_span(
    queue: str, job_type: str, job_id: UUID, attempt: int, trace_context: str | None
) -> Iterator[Span]:
    parent = _context_from(trace_context)
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
                    "messaging.message.id": str(job_id),
                    "caravel.job.type": job_type,
                    "caravel.job.attempt": attempt,
                }
            )
        yield span


def mark_failure(span: Span, error_type: str, category: str, detail: str | None = None) -> None:
    """Describe a failed attempt on its span: the exception's type, our category and the safe
    detail a handler or redactor gave (``caravel.failure.detail``), never its message."""
    if span.is_recording():
        span.set_attributes({"error.type": error_type, "caravel.failure.category": category})
        if detail is not None:
            span.set_attribute("caravel.failure.detail", detail)
        span.set_status(Status(StatusCode.ERROR))


def mark_attempt(span: Span, outcome: str | None, error_class: str | None) -> None:
    """Describe how the attempt ended on its span, as its record will: the outcome
    (``completed``, ``failed``...; ``None`` for an attempt abandoned without one) and the class
    of the exception behind a failure (``module.QualName``), never its message."""
    if span.is_recording():
        if outcome is not None:
            span.set_attribute("caravel.attempt.outcome", outcome)
        if error_class is not None:
            span.set_attribute("caravel.failure.error_class", error_class)


# ----- outcomes ------------------------------------------------------------------------------


def record_outcome(
    queue: str,
    job_type: str,
    *,
    seconds: float,
    category: str | None,
    dead: bool,
    abandoned: str | None,
    snoozed: bool = False,
) -> None:
    """One attempt's end: completed, failed (``category``; ``dead`` when it was the last),
    ``snoozed`` (to run again later, not an attempt), or ``abandoned`` without an
    acknowledgement (the reason)."""
    labels = {"messaging.destination.name": queue, "caravel.job.type": job_type}
    outcome = abandoned or ("failed" if category else "snoozed" if snoozed else "completed")
    duration.record(seconds, {**labels, "caravel.outcome": outcome})
    if abandoned is not None:
        leases_lost.add(1, {"messaging.destination.name": queue, "caravel.reason": abandoned})
    elif snoozed:
        pass  # neither completed nor failed: the job runs again
    elif category is None:
        completed.add(1, labels)
    else:
        failed.add(1, {**labels, "caravel.failure.category": category})
        if dead:
            dead_lettered.add(1, {**labels, "caravel.failure.category": category})


def record_enqueued(queue: str, job_type: str, *, repeated: bool, count: int) -> None:
    """``count`` jobs accepted by enqueue (``repeated``: returned by their idempotency key)."""
    enqueued.add(
        count,
        {
            "messaging.destination.name": queue,
            "caravel.job.type": job_type,
            "caravel.already_enqueued": repeated,
        },
    )


def record_claimed(queue: str, job_type: str, count: int) -> None:
    claimed_jobs.add(count, {"messaging.destination.name": queue, "caravel.job.type": job_type})


def record_dead_lettered(queue: str, category: str, count: int) -> None:
    """Jobs a claim moved to dead letter (their last lease had expired)."""
    dead_lettered.add(
        count, {"messaging.destination.name": queue, "caravel.failure.category": category}
    )


def record_replayed(queue: str) -> None:
    replayed.add(1, {"messaging.destination.name": queue})


def record_renewal(queue: str) -> None:
    renewals.add(1, {"messaging.destination.name": queue})


def record_lease_lost(queue: str, reason: str) -> None:
    leases_lost.add(1, {"messaging.destination.name": queue, "caravel.reason": reason})


def record_stuck(queue: str, job_type: str) -> None:
    """A handler ignored its timeout's cancellation for longer than the grace."""
    stuck_jobs.add(1, {"messaging.destination.name": queue, "caravel.job.type": job_type})


def record_hook_failure(hook: str, reason: str) -> None:
    """An alert hook's call that raised, timed out or was dropped (``reason``)."""
    hook_failures.add(1, {"caravel.hook": hook, "caravel.reason": reason})


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


# ----- workflows -----------------------------------------------------------------------------


class WorkflowStepSpan:
    """One step of a workflow as its span sees it (a group of ``add_many`` members is one step):
    its name, the queue its first member goes to, how many jobs it has, the job id when it has
    one, and the names of the steps it runs after."""

    __slots__ = ("after", "job_id", "members", "queue", "step")

    def __init__(
        self, step: str, queue: str, members: int, job_id: UUID | None, after: Sequence[str]
    ) -> None:
        self.step = step
        self.queue = queue
        self.members = members
        self.job_id = job_id
        self.after = tuple(after)


class WorkflowTrace:
    """What :func:`workflow_trace` yields: each step's trace-context carrier (the jobs of step
    ``name`` store ``carriers[name]``, so their runs are children of the step's span), and
    :meth:`inserted` to say what the insert did."""

    __slots__ = ("_root", "carriers")

    def __init__(self, root: Span, carriers: Mapping[str, str]) -> None:
        self._root = root
        self.carriers = carriers

    @classmethod
    def off(cls) -> WorkflowTrace:
        """The trace of an enqueue while nothing is traced: no spans, no carriers."""
        return cls(INVALID_SPAN, {})

    def inserted(self, workflow_id: UUID, created: bool) -> None:
        """The workflow's id as stored (on an idempotent repeat, the original's) and whether
        this enqueue created it."""
        if self._root.is_recording():
            self._root.set_attributes(
                {"caravel.workflow.id": str(workflow_id), "caravel.already_enqueued": not created}
            )


@contextmanager
def workflow_trace(
    workflow_id: UUID, name: str | None, steps: Sequence[WorkflowStepSpan]
) -> Iterator[WorkflowTrace]:
    """The spans of a workflow's enqueue: a root span ``caravel.workflow`` (a child of the
    caller's current span) and, under it, one producer span ``caravel.workflow.step`` per step,
    linked to the spans of the steps it runs after. The step spans end here, at enqueue; each
    step's jobs carry its span's context, so every run of a step (retries and replays too) is a
    child of its step's span and the whole workflow is one trace. ``steps`` come in any order
    (a step's span is opened after those of its dependencies, so they can be linked)."""
    if not tracing():
        yield WorkflowTrace.off()
        return
    with tracer.start_as_current_span("caravel.workflow", kind=SpanKind.INTERNAL) as root:
        if root.is_recording():
            root.set_attributes(
                {
                    "messaging.system": SYSTEM,
                    "caravel.workflow.id": str(workflow_id),
                    "caravel.workflow.steps": len(steps),
                    "messaging.batch.message_count": sum(s.members for s in steps),
                }
            )
            if name is not None:
                root.set_attribute("caravel.workflow.name", name)
        contexts: dict[str, trace.SpanContext] = {}
        carriers: dict[str, str] = {}
        for one in _dependencies_first(steps):
            links = [
                Link(contexts[before], {"caravel.workflow.step": before})
                for before in one.after
                if before in contexts
            ]
            span = tracer.start_span("caravel.workflow.step", kind=SpanKind.PRODUCER, links=links)
            if span.is_recording():
                span.set_attributes(
                    {
                        **_base(one.queue),
                        "messaging.operation.type": "send",
                        "caravel.workflow.id": str(workflow_id),
                        "caravel.workflow.step": one.step,
                    }
                )
                if one.job_id is not None:
                    span.set_attribute("messaging.message.id", str(one.job_id))
                else:
                    span.set_attribute("messaging.batch.message_count", one.members)
            span.end()
            contexts[one.step] = span.get_span_context()
            carrier = _carrier_of(span)
            if carrier is not None:
                carriers[one.step] = carrier
        yield WorkflowTrace(root, carriers)


def _dependencies_first(steps: Sequence[WorkflowStepSpan]) -> list[WorkflowStepSpan]:
    """``steps`` ordered so that each comes after the steps it runs after (a workflow is
    acyclic: the enqueue refused a cycle before; a dependency on no listed step is ignored)."""
    by_name = {one.step: one for one in steps}
    ordered: list[WorkflowStepSpan] = []
    placed: set[str] = set()
    for start in steps:
        if start.step in placed:
            continue
        # Depth first, without recursion: a chain of 20,000 steps is 20,000 deep.
        pending: list[tuple[WorkflowStepSpan, int]] = [(start, 0)]
        entered = {start.step}
        while pending:
            one, next_index = pending.pop()
            if next_index < len(one.after):
                pending.append((one, next_index + 1))
                before = by_name.get(one.after[next_index])
                if before is not None and before.step not in placed and before.step not in entered:
                    entered.add(before.step)
                    pending.append((before, 0))
                continue
            placed.add(one.step)
            ordered.append(one)
    return ordered
