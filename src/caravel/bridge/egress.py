"""Egress: deliver committed outbox intents to a message broker, at least once.

Each pass reads the oldest pending envelopes of the outbox table (as the queue relay does),
turns each into a message (its id the envelope's id, its body the stored canonical JSON, its
headers the tenant, job type, queue and trace context), publishes them all with the broker's
confirmation and only then records them as dispatched. The record of a pass and the broker's
confirmation are two systems, so a relay that dies between them sends those intents again on
restart, under the same message id: duplicates are possible there and only there, and a broker
with a dedupe window (JetStream's ``Nats-Msg-Id``) or a consumer keyed by the message id (Caravel's
own ingress) drops them.

An intent that cannot be delivered (no route for it, unroutable at the broker, refused by it)
stays pending with the reason recorded, is tried again after a growing delay, is counted and
logged without its payload, and never holds up the intents behind it. A lost broker connection
raises :class:`~caravel.errors.BrokerError` and records nothing for the pass.
"""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import timedelta
from typing import TYPE_CHECKING
from uuid import UUID

from caravel import gauges, telemetry
from caravel._failpoints import failpoint
from caravel.bridge.messages import (
    HEADER_JOB_TYPE,
    HEADER_QUEUE,
    HEADER_TENANT,
    HEADER_TRACEPARENT,
    HEADER_TRACESTATE,
    OutgoingMessage,
)
from caravel.bridge.outages import DEFAULT_OUTAGE_WINDOW, Outage
from caravel.bridge.ports import Publisher
from caravel.bridge.routing import EgressRoutes
from caravel.clock import Clock, SystemClock
from caravel.errors import BrokerError, OptionsError
from caravel.outbox import OUTBOX_TABLE
from caravel.outbox.relay import held_back, warn_stuck
from caravel.store import open_outbox_store
from caravel.store.outbox import PendingEnvelope
from caravel.validation import check_duration, check_int

if TYPE_CHECKING:
    import sqlalchemy as sa
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["BrokerRelay", "message_for"]

logger = logging.getLogger("caravel.bridge")

MAX_BATCH = 1000


def _trace_headers(trace_context: str | None) -> dict[str, str]:
    """The W3C headers stored (as JSON) with the intent, if any."""
    if not trace_context:
        return {}
    try:
        values = json.loads(trace_context)
    except ValueError:
        return {}
    if not isinstance(values, dict):
        return {}
    wanted = (HEADER_TRACEPARENT, HEADER_TRACESTATE)
    return {k: v for k, v in values.items() if k in wanted and isinstance(v, str)}


def message_for(envelope: PendingEnvelope, routes: EgressRoutes) -> OutgoingMessage | None:
    """The message carrying ``envelope``, or ``None`` when no route covers it."""
    destination = routes.destination_for(envelope.queue, envelope.job_type)
    if destination is None:
        return None
    headers = {
        HEADER_TENANT: envelope.tenant_id,
        HEADER_JOB_TYPE: envelope.job_type,
        HEADER_QUEUE: envelope.queue,
        **_trace_headers(envelope.trace_context),
    }
    return OutgoingMessage(
        message_id=str(envelope.id),
        destination=destination,
        body=envelope.payload.encode("utf-8"),
        headers=headers,
    )


class BrokerRelay:
    """Publishes committed outbox intents to a broker through ``publisher``.

    ``app`` is the application's async engine (or its URL) holding the outbox table
    ``table_name`` (give this relay an outbox table of its own: the queue's
    :class:`~caravel.outbox.OutboxRelay` on the same table would take the same intents).
    ``routes`` says where each intent goes. ``batch_size`` (1 to 1,000, default 100) bounds one
    pass and one confirmed publish; ``poll_interval`` (default 1 s) is the pause after a pass
    that found nothing more to do; ``outage_window`` (default 1 minute) how long :meth:`run`
    rides out a broker that cannot be reached.
    """

    def __init__(
        self,
        app: AsyncEngine | str | sa.URL,
        publisher: Publisher,
        routes: EgressRoutes,
        *,
        table_name: str = OUTBOX_TABLE,
        batch_size: int = 100,
        poll_interval: timedelta = timedelta(seconds=1),
        clock: Clock | None = None,
        outage_window: timedelta = DEFAULT_OUTAGE_WINDOW,
    ) -> None:
        check_int("batch_size", batch_size, 1, MAX_BATCH, error=OptionsError)
        check_duration(
            "poll_interval",
            poll_interval,
            timedelta(milliseconds=10),
            timedelta(hours=1),
            "must be from 10 milliseconds to 1 hour",
            error=OptionsError,
        )
        if not isinstance(routes, EgressRoutes):
            raise OptionsError("routes", "must be EgressRoutes")
        self._outbox = open_outbox_store(app, table_name)
        self.publisher = publisher
        self.routes = routes
        self.batch_size = batch_size
        self.poll_interval = poll_interval
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._outage = Outage(outage_window)
        self._stop = asyncio.Event()
        self._last_pass_full = False
        self.published = 0
        self.stuck = 0

    @property
    def table_name(self) -> str:
        return self._outbox.table_name

    async def close(self) -> None:
        """Release the application engine if the relay created it (the broker stays open)."""
        await self._outbox.close()

    def stop(self) -> None:
        """Ask :meth:`run` to return after the current pass."""
        self._stop.set()

    async def run(self) -> None:
        """Relay until :meth:`stop`. A broker failure pauses the relay and it tries again, for
        up to ``outage_window``; after that the :class:`~caravel.errors.BrokerError`
        propagates, and a database error (:class:`~caravel.errors.StoreError`) at once. A
        restart picks up every intent not recorded as dispatched."""
        while not self._stop.is_set():
            try:
                await self.run_once()
            except BrokerError as error:
                await self._outage.pause(error, self._stop)
                continue
            self._outage.clear()
            if self._last_pass_full:
                continue  # more may be waiting right behind
            try:
                async with asyncio.timeout(self.poll_interval.total_seconds()):
                    await self._stop.wait()
            except TimeoutError:
                pass

    async def run_once(self) -> int:
        """One pass: returns how many intents the broker confirmed and were recorded."""
        now = self.clock.now_ms()
        rows, backlog = await self._outbox.outbox_read_pass(now, self.batch_size)
        self._last_pass_full = len(rows) >= self.batch_size
        if not rows:
            gauges.record_outbox_pending(self.table_name, backlog)
            return 0
        ready: list[tuple[PendingEnvelope, OutgoingMessage]] = []
        stuck: list[tuple[PendingEnvelope, str]] = []
        for row in rows:
            message = message_for(row, self.routes)
            if message is None:
                stuck.append((row, "NoRoute"))
            else:
                ready.append((row, message))
        failpoint("bridge_before_publish")
        with telemetry.bridge_publish_span(len(ready)):
            refused = await self.publisher.publish([message for _, message in ready])
        # Confirmed by the broker and not recorded yet: a crash here sends these again.
        failpoint("bridge_after_confirm")
        by_id = {r.message_id: r.category for r in refused}
        delivered: list[PendingEnvelope] = []
        for row, message in ready:
            category = by_id.get(message.message_id)
            if category is None:
                delivered.append(row)
            else:
                stuck.append((row, category))
        await self._record(delivered, stuck)
        for row in delivered:
            telemetry.record_bridge_published(row.queue, row.job_type)
        for row, reason in stuck:
            telemetry.record_bridge_unpublished(row.queue, reason)
        gauges.record_outbox_pending(self.table_name, backlog - len(delivered))
        self.published += len(delivered)
        return len(delivered)

    async def _record(
        self, delivered: list[PendingEnvelope], stuck: list[tuple[PendingEnvelope, str]]
    ) -> None:
        now = self.clock.now_ms()
        # No queue job carries an intent a broker took.
        published: dict[UUID, UUID | None] = {row.id: None for row in delivered}
        await self._outbox.outbox_record_pass(published, held_back(stuck, now), now)
        self.stuck += len(stuck)
        warn_stuck(logger, "outbox intent cannot be published; it stays pending", stuck)
