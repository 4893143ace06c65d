"""Ingress: turn broker messages into Caravel jobs, exactly one job per message id.

Each pass fetches the deliveries the broker has (at most the subscription's in-flight bound are
unsettled at once: backpressure), maps each to a registered job type and queue by the
:class:`~caravel.bridge.routing.IngressRoutes`, validates it as any enqueue is validated, and
inserts the good ones in one transaction with the message id as their idempotency key. Only
after that transaction committed does it acknowledge them to the broker. A consumer that dies
before the acknowledgement gets the messages again; the same id and payload find the job the
first delivery made, so a redelivery never makes a second job.

A message that cannot become a job is rejected to the broker's dead letters with its
:data:`~caravel.bridge.failures.IngressFailure` category, counted and logged without its body,
and the consumer goes on with the next. A database failure stops the consumer with
:class:`~caravel.errors.StoreError` and settles nothing of that pass: the broker delivers it
again.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta

from pydantic import ValidationError as PydanticValidationError

from caravel import telemetry
from caravel._failpoints import failpoint
from caravel.bridge.failures import IngressFailure
from caravel.bridge.messages import (
    HEADER_TENANT,
    HEADER_TRACEPARENT,
    HEADER_TRACESTATE,
    IncomingMessage,
)
from caravel.bridge.outages import DEFAULT_OUTAGE_WINDOW, Outage
from caravel.bridge.ports import AcknowledgesMany, Delivery, Subscription
from caravel.bridge.routing import IngressRoutes
from caravel.errors import BrokerError, IdempotencyConflictError, OptionsError, ValidationError
from caravel.jobs import DEFAULT_TENANT, DispatchOptions
from caravel.limits import MAX_TRACE_CONTEXT_LENGTH
from caravel.preparation import prepare_job
from caravel.queue import DatabaseQueue
from caravel.store.protocol import NewJob
from caravel.validation import check_duration, check_identifier, check_int

__all__ = ["BrokerConsumer", "IngressPass", "MessageRejected", "job_for"]

logger = logging.getLogger("caravel.bridge")

MAX_BATCH = 1000


@dataclass(frozen=True, slots=True)
class IngressPass:
    """What one pass did: messages that made a new job, that found their job already there (a
    redelivery or a repeated publish), and that were rejected to the dead letters."""

    created: int = 0
    repeated: int = 0
    rejected: int = 0

    @property
    def settled(self) -> int:
        return self.created + self.repeated + self.rejected


class MessageRejected(Exception):
    """A message that cannot become a job; ``category`` says why."""

    def __init__(self, category: IngressFailure) -> None:
        super().__init__(category)
        self.category: IngressFailure = category


def _trace_context(headers: Mapping[str, str]) -> str | None:
    """The message's W3C trace headers as the carrier a job stores, so its run continues the
    publisher's trace; ``None`` without a ``traceparent``."""
    parent = headers.get(HEADER_TRACEPARENT)
    if not parent:
        return None
    carrier = {HEADER_TRACEPARENT: parent}
    state = headers.get(HEADER_TRACESTATE)
    if state:
        carrier[HEADER_TRACESTATE] = state
    text = json.dumps(carrier, separators=(",", ":"), sort_keys=True)
    return text if len(text) <= MAX_TRACE_CONTEXT_LENGTH else None


def job_for(
    message: IncomingMessage,
    routes: IngressRoutes,
    queue: DatabaseQueue,
    *,
    require_tenant: bool,
    now: int,
) -> NewJob:
    """The job ``message`` stands for in ``queue``, validated and serialized as an enqueue
    would, with the message id as its idempotency key; :class:`MessageRejected` with the
    category when it cannot be one. Writes nothing."""
    if not message.message_id:
        raise MessageRejected("MissingMessageId")
    try:
        key = check_identifier(message.message_id, "message_id")
    except ValidationError:
        raise MessageRejected("InvalidMessageId") from None
    tenant = message.headers.get(HEADER_TENANT)
    if tenant is None:
        if require_tenant:
            raise MessageRejected("MissingTenant")
        tenant = DEFAULT_TENANT
    else:
        try:
            check_identifier(tenant, "tenant_id")
        except ValidationError:
            raise MessageRejected("InvalidTenant") from None
    if len(message.body) > queue.options.max_payload_bytes:
        raise MessageRejected("PayloadTooLarge")
    target = routes.target_for(message)
    if target is None:
        raise MessageRejected("UnknownJobType")
    try:
        value = json.loads(message.body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise MessageRejected("MalformedJson") from None
    try:
        job = target.registration.adapter.validate_python(value)
        dispatch = DispatchOptions(queue=target.queue, tenant_id=tenant, idempotency_key=key)
        prepared = prepare_job(queue.registry, queue.options, job, dispatch, now)
    except (PydanticValidationError, ValidationError) as error:
        too_large = isinstance(error, ValidationError) and error.field == "payload"
        raise MessageRejected("PayloadTooLarge" if too_large else "InvalidPayload") from None
    trace = _trace_context(message.headers)
    return prepared if trace is None else prepared._replace(trace_context=trace)


class BrokerConsumer:
    """Enqueues the messages of ``subscription`` into ``queue`` as jobs.

    ``routes`` maps messages to registered job types and queues. With ``require_tenant``
    (default) a message must carry the ``caravel-tenant`` header; without it, a message
    lacking one goes to the default tenant. ``batch_size`` (1 to 1,000, default 100) bounds the
    deliveries one pass settles (and one database transaction inserts); it is at most the
    subscription's in-flight bound. ``fetch_timeout`` (default 1 s) is how long a pass waits for
    a first message; ``outage_window`` (default 1 minute) how long :meth:`run` rides out a
    broker that cannot be reached.
    """

    def __init__(
        self,
        queue: DatabaseQueue,
        subscription: Subscription,
        routes: IngressRoutes,
        *,
        require_tenant: bool = True,
        batch_size: int = 100,
        fetch_timeout: timedelta = timedelta(seconds=1),
        outage_window: timedelta = DEFAULT_OUTAGE_WINDOW,
    ) -> None:
        check_int("batch_size", batch_size, 1, MAX_BATCH, error=OptionsError)
        check_duration(
            "fetch_timeout",
            fetch_timeout,
            timedelta(milliseconds=1),
            timedelta(minutes=10),
            "must be from 1 millisecond to 10 minutes",
            error=OptionsError,
        )
        if not isinstance(routes, IngressRoutes):
            raise OptionsError("routes", "must be IngressRoutes")
        self.queue = queue
        self.subscription = subscription
        self.routes = routes
        self.require_tenant = require_tenant
        self.batch_size = min(batch_size, subscription.max_in_flight)
        self.fetch_timeout = fetch_timeout
        self._outage = Outage(outage_window)
        self._stop = asyncio.Event()
        self.created = 0
        self.repeated = 0
        self.rejected = 0

    def stop(self) -> None:
        """Ask :meth:`run` to return after the current pass."""
        self._stop.set()

    async def run(self) -> None:
        """Consume until :meth:`stop`. A broker failure pauses the consumer and it tries
        again, for up to ``outage_window``; after that the :class:`~caravel.errors.BrokerError`
        propagates, and a database error (:class:`~caravel.errors.StoreError`) at once. What a
        failing pass fetched and did not settle is delivered again by the broker."""
        while not self._stop.is_set():
            try:
                await self.run_once()
            except BrokerError as error:
                await self._outage.pause(error, self._stop)
                continue
            self._outage.clear()

    async def run_once(self) -> IngressPass:
        """One pass: fetch, enqueue, then settle every delivery fetched."""
        deliveries = await self.subscription.fetch(
            self.batch_size, self.fetch_timeout.total_seconds()
        )
        if not deliveries:
            return IngressPass()
        now = self.queue.clock.now_ms()
        ready: list[tuple[Delivery, NewJob]] = []
        rejected: list[tuple[Delivery, IngressFailure]] = []
        for delivery in deliveries:
            try:
                job = job_for(
                    delivery.message,
                    self.routes,
                    self.queue,
                    require_tenant=self.require_tenant,
                    now=now,
                )
                ready.append((delivery, job))
            except MessageRejected as failure:
                rejected.append((delivery, failure.category))
        with telemetry.bridge_consume_span(len(deliveries)):
            failpoint("bridge_before_commit")
            created, repeated = await self._insert(ready, rejected)
            # Committed and not acknowledged yet: a crash here has the broker deliver them again.
            failpoint("bridge_after_commit")
            # Rejects first: every delivery of the pass is then settled by the acknowledgement
            # of the rest, which a broker may make one cumulative acknowledgement.
            for delivery, category in rejected:
                await self._reject(delivery, category)
            refused = {id(delivery) for delivery, _ in rejected}
            taken = [(d, job) for d, job in ready if id(d) not in refused]
            await self._ack([delivery for delivery, _ in taken])
            for _, job in taken:
                telemetry.record_bridge_consumed(self.subscription.source, job.job_type)
        self.created += created
        self.repeated += repeated
        self.rejected += len(rejected)
        return IngressPass(created, repeated, len(rejected))

    async def _insert(
        self,
        ready: Sequence[tuple[Delivery, NewJob]],
        rejected: list[tuple[Delivery, IngressFailure]],
    ) -> tuple[int, int]:
        """Insert the jobs of ``ready`` in one transaction; on a conflict, one by one, moving
        the conflicting ones to ``rejected``. Returns (created, repeated)."""
        if not ready:
            return 0, 0
        try:
            results = await self.queue.insert_prepared([job for _, job in ready])
        except IdempotencyConflictError:
            results = None  # find the conflicting message(s) one by one; the rest go through
        if results is not None:
            repeated = sum(result.already_enqueued for result in results)
            return len(results) - repeated, repeated
        created = repeated = 0
        for delivery, job in ready:
            try:
                (result,) = await self.queue.insert_prepared([job])
            except IdempotencyConflictError:
                rejected.append((delivery, "IdempotencyConflict"))
                continue
            repeated += result.already_enqueued
            created += not result.already_enqueued
        return created, repeated

    async def _ack(self, deliveries: list[Delivery]) -> None:
        if isinstance(self.subscription, AcknowledgesMany):
            await self.subscription.ack_many(deliveries)
            return
        for delivery in deliveries:
            await delivery.ack()

    async def _reject(self, delivery: Delivery, category: IngressFailure) -> None:
        await delivery.reject(category)
        telemetry.record_bridge_rejected(self.subscription.source, category)
        logger.warning(
            "broker message rejected to the dead letters",
            extra={"source": delivery.message.source, "category": category},
        )
