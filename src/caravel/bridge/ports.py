"""The contract between the bridge services and a broker adapter.

A broker adapter (:mod:`caravel.bridge.rabbitmq`, :mod:`caravel.bridge.nats`) supplies a
:class:`Broker`: a :class:`Publisher` for egress and :class:`Subscription` objects for ingress.
The relay and the consumer see only these protocols, so both brokers get the same delivery
rules from one implementation. Adapters raise :class:`~caravel.errors.BrokerError` for a
broker failure and translate their client's exceptions at this boundary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from caravel.bridge.failures import EgressFailure, IngressFailure
from caravel.bridge.messages import IncomingMessage, OutgoingMessage

__all__ = ["AcknowledgesMany", "Broker", "Delivery", "Publisher", "Refused", "Subscription"]


@dataclass(frozen=True, slots=True)
class Refused:
    """A message the broker answered but did not take: its id, and why."""

    message_id: str
    category: EgressFailure


@runtime_checkable
class Publisher(Protocol):
    """Publishes messages with the broker's confirmation."""

    async def publish(self, messages: Sequence[OutgoingMessage]) -> list[Refused]:
        """Publish ``messages`` and return once the broker has answered every one of them:
        the ones it refused (nothing when it confirmed them all). Every message not in the
        answer is confirmed, durably as far as the broker promises. A lost connection or a
        missing answer raises :class:`~caravel.errors.BrokerError`; then any of them may or
        may not have reached the broker, and the caller sends them all again under the same
        ids."""
        ...


@runtime_checkable
class Delivery(Protocol):
    """One message handed to a consumer, to settle exactly once."""

    @property
    def message(self) -> IncomingMessage: ...

    async def ack(self) -> None:
        """Tell the broker the message is taken care of; it will not deliver it again."""
        ...

    async def reject(self, category: IngressFailure) -> None:
        """Send the message to the broker's dead letters with ``category`` (where the broker can
        carry it); it will not be delivered to this consumer again."""
        ...


@runtime_checkable
class Subscription(Protocol):
    """Messages from one broker queue or durable consumer, with a bound on how many are
    delivered and not settled at once (the broker stops sending past it: backpressure)."""

    @property
    def source(self) -> str:
        """What it reads (the queue or durable consumer's name), for metrics and logs."""
        ...

    @property
    def max_in_flight(self) -> int: ...

    async def fetch(self, limit: int, wait: float) -> list[Delivery]:
        """Up to ``limit`` deliveries: whatever is there once the first arrives, waiting at most
        ``wait`` seconds for it (an empty list after that)."""
        ...

    async def close(self) -> None:
        """Stop receiving; deliveries not settled go back to the broker for redelivery."""
        ...


@runtime_checkable
class AcknowledgesMany(Protocol):
    """A capability of a :class:`Subscription` whose broker acknowledges many deliveries in one
    round trip (RabbitMQ's cumulative ``basic.ack``); the consumer acknowledges a pass's
    deliveries one by one where a subscription lacks it."""

    async def ack_many(self, deliveries: Sequence[Delivery]) -> None:
        """Acknowledge ``deliveries`` (fetched from this subscription) as each one's
        :meth:`Delivery.ack` would, never covering another delivery not settled yet."""
        ...


@runtime_checkable
class Broker(Protocol):
    """A connection to one broker, made by :func:`caravel.bridge.open_broker`."""

    @property
    def url(self) -> str:
        """The broker's URL without credentials (for logs and progress lines)."""
        ...

    async def publisher(self) -> Publisher:
        """A publisher with confirmations on."""
        ...

    async def subscribe(self, source: str, *, max_in_flight: int) -> Subscription:
        """Deliveries from ``source`` (a RabbitMQ queue name; a JetStream ``stream:durable``),
        at most ``max_in_flight`` unsettled at once."""
        ...

    async def close(self) -> None:
        """Close the connection; unsettled deliveries go back to the broker."""
        ...
