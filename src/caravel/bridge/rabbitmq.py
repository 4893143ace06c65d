"""The RabbitMQ adapter, over aio-pika (the ``rabbitmq`` extra).

Egress publishes persistent messages, each with its ``message_id`` and ``mandatory`` set, on a
channel with publisher confirms: a message counts as delivered when the broker acknowledged it,
is ``Unroutable`` when the broker returned it (no queue bound for its routing key) and
``BrokerRefused`` when the broker negatively acknowledged it.

Ingress consumes one queue with manual acknowledgements and a prefetch count (the in-flight
bound). The topology it declares for a queue ``Q`` (with ``declare``, the default), all durable:

- ``Q`` itself, with ``x-dead-letter-exchange`` set to ``Q.dlx``, bound to each exchange and
  pattern of ``bindings`` (each exchange declared as a durable topic exchange);
- ``Q.dlx``, a fanout exchange, and ``Q.dead-letter``, the queue bound to it that keeps the
  rejected messages.

A rejected message is published to the dead-letter exchange (confirmed, with the
``caravel-failure`` header naming its category, its id, headers and body unchanged) and then
acknowledged. Without ``declare`` the queue must exist; give ``dead_letter_exchange`` to have
rejects published there the same way, or leave it out to have them rejected with
``basic.reject`` (``requeue=False``): the queue's own ``x-dead-letter-exchange`` argument or
policy then decides where they go, and the category is only in the logs and metrics.

The connection is aio-pika's robust one: after a reset it reconnects and consumes again. What
was delivered on the lost channel and not acknowledged is delivered again by the broker;
acknowledging it on the dead channel is skipped, not an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Mapping, Sequence
from typing import Any

import aio_pika
import aiormq.exceptions
import yarl
from aio_pika.abc import (
    AbstractChannel,
    AbstractExchange,
    AbstractIncomingMessage,
    AbstractQueue,
    AbstractRobustConnection,
)

from caravel.bridge.brokers import redacted
from caravel.bridge.failures import HEADER_FAILURE, IngressFailure
from caravel.bridge.messages import IncomingMessage, OutgoingMessage
from caravel.bridge.ports import Delivery, Refused
from caravel.errors import BrokerError, ValidationError

__all__ = ["RabbitBroker", "open_broker"]

logger = logging.getLogger("caravel.bridge")

#: How long one broker operation may take before it counts as a lost connection.
OPERATION_TIMEOUT = 30.0

#: How long a fetch that has messages waits for one more before it returns them (seconds).
LINGER = 0.005

#: What a lost or refused connection, a closed channel or a missing answer raise in aio-pika.
_BROKER_FAILURES = (
    aiormq.exceptions.AMQPError,
    aiormq.exceptions.ChannelInvalidStateError,
    ConnectionError,
    OSError,
    TimeoutError,
)


def _failure(operation: str, url: str, error: BaseException) -> BrokerError:
    """A :class:`BrokerError` for ``error``: its class name, and the broker's own reply text
    for a channel or connection it closed (which names the exchange or queue, never a body)."""
    reason = type(error).__name__
    if isinstance(error, aiormq.exceptions.AMQPError) and error.args:
        frame = error.args[0] if len(error.args) == 1 else error.args[-1]
        text = getattr(frame, "reply_text", None) or (frame if isinstance(frame, str) else None)
        if text:
            reason = f"{reason}: {text}"
    return BrokerError(operation, f"{reason} ({url})")


def _headers(raw: Mapping[str, Any] | None) -> dict[str, str]:
    """String headers of an AMQP message; other types (numbers, tables) are left out."""
    found: dict[str, str] = {}
    for name, value in (raw or {}).items():
        if isinstance(value, str):
            found[name] = value
        elif isinstance(value, bytes):
            try:
                found[name] = value.decode("utf-8")
            except UnicodeDecodeError:
                continue
    return found


class RabbitPublisher:
    """Publishes with confirms on one channel; exchanges are declared on first use when the
    broker was opened with ``declare``."""

    def __init__(self, broker: RabbitBroker, channel: AbstractChannel) -> None:
        self._broker = broker
        self._channel = channel
        self._exchanges: dict[str, AbstractExchange] = {}

    async def _exchange(self, name: str) -> AbstractExchange:
        found = self._exchanges.get(name)
        if found is None:
            if name == "":
                found = self._channel.default_exchange
            elif self._broker.declare:
                found = await self._channel.declare_exchange(
                    name, aio_pika.ExchangeType.TOPIC, durable=True
                )
            else:
                found = await self._channel.get_exchange(name, ensure=False)
            self._exchanges[name] = found
        return found

    async def publish(self, messages: Sequence[OutgoingMessage]) -> list[Refused]:
        if not messages:
            return []
        try:
            async with asyncio.timeout(OPERATION_TIMEOUT):
                exchanges = {
                    name: await self._exchange(name)
                    for name in {m.destination.exchange for m in messages}
                }
                answers = await asyncio.gather(
                    *(self._publish_one(exchanges[m.destination.exchange], m) for m in messages),
                    return_exceptions=True,
                )
        except _BROKER_FAILURES as error:
            self._exchanges.clear()
            raise _failure("publish", self._broker.url, error) from error
        refused: list[Refused] = []
        for message, answer in zip(messages, answers, strict=True):
            if answer is None:
                continue
            if isinstance(answer, aiormq.exceptions.PublishError):
                refused.append(Refused(message.message_id, "Unroutable"))
            elif isinstance(answer, aiormq.exceptions.DeliveryError):
                refused.append(Refused(message.message_id, "BrokerRefused"))
            else:  # the connection or channel failed under this message: none is settled
                self._exchanges.clear()
                raise _failure("publish", self._broker.url, answer) from answer
        return refused

    @staticmethod
    async def _publish_one(exchange: AbstractExchange, message: OutgoingMessage) -> None:
        await exchange.publish(
            aio_pika.Message(
                message.body,
                headers=dict(message.headers),
                content_type=message.content_type,
                message_id=message.message_id,
                delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            ),
            routing_key=message.destination.key,
            mandatory=True,
        )


class RabbitDelivery:
    """One delivered message, settled on the channel that delivered it."""

    __slots__ = ("_raw", "_subscription", "message")

    def __init__(self, raw: AbstractIncomingMessage, subscription: RabbitSubscription) -> None:
        self._raw = raw
        self._subscription = subscription
        self.message = IncomingMessage(
            message_id=raw.message_id,
            body=raw.body,
            headers=_headers(raw.headers),
            source=raw.routing_key or "",
            redelivered=bool(raw.redelivered),
        )

    def _channel_lost(self) -> bool:
        # The broker gives back every unacknowledged delivery of a closed channel; there is
        # nothing left to settle, and it will come again.
        return bool(self._raw.channel.is_closed)

    @property
    def raw(self) -> AbstractIncomingMessage:
        return self._raw

    async def ack(self) -> None:
        await self._subscription.ack_many([self])

    async def reject(self, category: IngressFailure) -> None:
        self._subscription.settled(self._raw)
        if self._channel_lost():
            return
        exchange = self._subscription.dead_letter_exchange
        try:
            if exchange is None:
                await self._raw.reject(requeue=False)
                return
            raw = self._raw
            channel = await self._subscription.channel.get_underlay_channel()
            await channel.basic_publish(
                raw.body,
                exchange=exchange,
                routing_key=raw.routing_key or "",
                properties=aiormq.spec.Basic.Properties(
                    headers={**(raw.headers or {}), HEADER_FAILURE: category},
                    content_type=raw.content_type,
                    message_id=raw.message_id,
                    delivery_mode=2,
                ),
                timeout=OPERATION_TIMEOUT,
            )
            await raw.ack()
        except _BROKER_FAILURES as error:
            if not self._channel_lost():
                raise _failure("reject", self._subscription.url, error) from error


class RabbitSubscription:
    """Deliveries of one queue, pushed by the broker up to the prefetch count and buffered
    here until :meth:`fetch` takes them."""

    def __init__(
        self,
        url: str,
        channel: AbstractChannel,
        queue: AbstractQueue,
        *,
        max_in_flight: int,
        dead_letter_exchange: str | None,
    ) -> None:
        self.url = url
        self.channel = channel
        self._queue = queue
        self._max_in_flight = max_in_flight
        self.dead_letter_exchange = dead_letter_exchange
        self._buffer: asyncio.Queue[AbstractIncomingMessage] = asyncio.Queue()
        self._tag: str | None = None
        # Delivery tags fetched and not settled, per channel that delivered them (a reconnect
        # brings a new one), so a cumulative acknowledgement never covers one of them by
        # accident.
        self._unsettled: dict[Any, set[int]] = {}

    @property
    def source(self) -> str:
        return self._queue.name

    @property
    def max_in_flight(self) -> int:
        return self._max_in_flight

    async def start(self) -> None:
        self._tag = await self._queue.consume(self._received, no_ack=False)

    async def _received(self, message: AbstractIncomingMessage) -> None:
        self._buffer.put_nowait(message)

    async def fetch(self, limit: int, wait: float) -> list[Delivery]:
        try:
            async with asyncio.timeout(wait):
                first = await self._buffer.get()
        except TimeoutError:
            if self.channel.is_closed:
                # Reconnecting: say so, so the consumer's outage window counts the time.
                raise BrokerError("consume", f"connection lost ({self.url})") from None
            return []
        raws = [first]
        while len(raws) < limit:
            if self._buffer.empty():
                # Messages arrive one frame at a time: a short wait for the next one makes a
                # pass, and its transaction, hold many of them while they flow.
                try:
                    async with asyncio.timeout(LINGER):
                        raws.append(await self._buffer.get())
                except TimeoutError:
                    break
                continue
            raws.append(self._buffer.get_nowait())
        for raw in raws:
            if raw.delivery_tag is not None:
                self._unsettled.setdefault(raw.channel, set()).add(raw.delivery_tag)
        return [RabbitDelivery(raw, self) for raw in raws]

    def settled(self, raw: AbstractIncomingMessage) -> None:
        """Forget ``raw``'s tag: it is being settled."""
        tags = self._unsettled.get(raw.channel)
        if tags is not None:
            tags.discard(raw.delivery_tag or 0)
            if not tags:
                del self._unsettled[raw.channel]

    async def ack_many(self, deliveries: Sequence[Delivery]) -> None:
        by_channel: dict[Any, list[AbstractIncomingMessage]] = {}
        for delivery in deliveries:
            if not isinstance(delivery, RabbitDelivery):
                raise ValidationError("deliveries", "must come from this subscription")
            by_channel.setdefault(delivery.raw.channel, []).append(delivery.raw)
        for channel, raws in by_channel.items():
            outstanding = sorted(self._unsettled.get(channel, ()))
            for raw in raws:
                self.settled(raw)
            if channel.is_closed:
                continue  # the broker delivers them again: nothing to settle
            await self._ack_on(channel, raws, outstanding)

    async def _ack_on(
        self, channel: Any, raws: list[AbstractIncomingMessage], outstanding: list[int]
    ) -> None:
        """One cumulative acknowledgement for the longest run of the oldest unsettled tags
        that ``raws`` covers, then one each for the rest."""
        by_tag = {raw.delivery_tag: raw for raw in raws}
        covered = 0
        for tag in outstanding:
            if tag not in by_tag:
                break
            covered = tag
        try:
            if covered:
                await by_tag[covered].ack(multiple=True)
            for number, raw in by_tag.items():
                if number is None or number > covered:
                    await raw.ack()
        except _BROKER_FAILURES as error:
            if not channel.is_closed:
                raise _failure("ack", self.url, error) from error

    async def close(self) -> None:
        if self._tag is not None and not self.channel.is_closed:
            # Closing the channel below settles it anyway.
            with contextlib.suppress(*_BROKER_FAILURES):
                await self._queue.cancel(self._tag, timeout=OPERATION_TIMEOUT)
        self._tag = None
        if not self.channel.is_closed:
            await self.channel.close()


class RabbitBroker:
    """A robust connection to one RabbitMQ server (see the module's documentation for the
    topology it declares)."""

    def __init__(
        self,
        connection: AbstractRobustConnection,
        url: str,
        *,
        declare: bool,
        bindings: Sequence[tuple[str, str]],
        dead_letter_exchange: str | None,
    ) -> None:
        self._connection = connection
        self._url = url
        self.declare = declare
        self.bindings = tuple(bindings)
        self.dead_letter_exchange = dead_letter_exchange
        self._subscriptions: list[RabbitSubscription] = []

    @property
    def url(self) -> str:
        return self._url

    async def publisher(self) -> RabbitPublisher:
        try:
            channel = await self._connection.channel(publisher_confirms=True, on_return_raises=True)
        except _BROKER_FAILURES as error:
            raise _failure("connect", self._url, error) from error
        return RabbitPublisher(self, channel)

    async def subscribe(self, source: str, *, max_in_flight: int) -> RabbitSubscription:
        if not 1 <= max_in_flight <= 65535:
            raise ValidationError("max_in_flight", "must be from 1 to 65,535 (AMQP's prefetch)")
        try:
            async with asyncio.timeout(OPERATION_TIMEOUT):
                channel = await self._connection.channel(
                    publisher_confirms=True, on_return_raises=False
                )
                await channel.set_qos(prefetch_count=max_in_flight)
                queue, dead_letters = await self._queue(channel, source)
                subscription = RabbitSubscription(
                    self._url,
                    channel,
                    queue,
                    max_in_flight=max_in_flight,
                    dead_letter_exchange=dead_letters,
                )
                await subscription.start()
        except _BROKER_FAILURES as error:
            raise _failure("consume", self._url, error) from error
        self._subscriptions.append(subscription)
        return subscription

    async def _queue(self, channel: AbstractChannel, name: str) -> tuple[AbstractQueue, str | None]:
        """The queue to consume and the exchange its rejects go to, declared as the module's
        documentation says when ``declare`` is set."""
        if not self.declare:
            queue = await channel.declare_queue(name, passive=True)
            return queue, self.dead_letter_exchange
        dead_letters = self.dead_letter_exchange or f"{name}.dlx"
        dlx = await channel.declare_exchange(
            dead_letters, aio_pika.ExchangeType.FANOUT, durable=True
        )
        kept = await channel.declare_queue(f"{name}.dead-letter", durable=True)
        await kept.bind(dlx, routing_key="")
        queue = await channel.declare_queue(
            name, durable=True, arguments={"x-dead-letter-exchange": dead_letters}
        )
        for exchange_name, pattern in self.bindings:
            exchange = await channel.declare_exchange(
                exchange_name, aio_pika.ExchangeType.TOPIC, durable=True
            )
            await queue.bind(exchange, routing_key=pattern)
        return queue, dead_letters

    async def close(self) -> None:
        for subscription in self._subscriptions:
            # The connection's close below gives the deliveries back.
            with contextlib.suppress(*_BROKER_FAILURES):
                await subscription.close()
        self._subscriptions.clear()
        await self._connection.close()


async def open_broker(
    url: str,
    *,
    declare: bool = True,
    bindings: Sequence[tuple[str, str]] = (),
    dead_letter_exchange: str | None = None,
    connection_name: str | None = None,
) -> RabbitBroker:
    """Connect to the RabbitMQ server at ``url`` (``amqp://user:password@host:port/vhost``).

    ``declare`` (default) declares what the module's documentation lists; ``bindings`` are
    ``(exchange, pattern)`` pairs a consumed queue is bound to; ``dead_letter_exchange``
    overrides ``Q.dlx`` (with ``declare``) or names the exchange rejects go to (without).
    ``connection_name`` is shown in RabbitMQ's connection list (default ``caravel-bridge
    HOST:PID``, so an operator can tell which process holds which connection); a ``name`` in
    the URL's query wins."""
    public = redacted(url)
    located = yarl.URL(url)
    if "name" not in located.query:
        name = connection_name or f"caravel-bridge {socket.gethostname()}:{os.getpid()}"
        located = located.update_query(name=name)
    try:
        async with asyncio.timeout(OPERATION_TIMEOUT):
            # The URL carries the name: aio-pika drops client_properties given beside a URL.
            connection = await aio_pika.connect_robust(located)
    except _BROKER_FAILURES as error:
        raise _failure("connect", public, error) from error
    return RabbitBroker(
        connection,
        public,
        declare=declare,
        bindings=bindings,
        dead_letter_exchange=dead_letter_exchange,
    )
