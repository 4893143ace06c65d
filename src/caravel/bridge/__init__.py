"""Message-broker bridges: the outbox and the queue meet RabbitMQ and NATS JetStream.

The database stays the source of truth. Egress (:class:`BrokerRelay`) publishes committed
outbox intents to a broker, at least once, and marks each delivered only after the broker
confirmed it. Ingress (:class:`BrokerConsumer`) turns broker messages into jobs, exactly one job
per message id, and acknowledges the broker only after the job row committed. Broker clients are
optional extras (``rabbitmq``, ``nats``), imported only when a broker URL of theirs is opened.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from caravel._lazy import lazy_attributes

if TYPE_CHECKING:
    from caravel.bridge.brokers import open_broker
    from caravel.bridge.egress import BrokerRelay
    from caravel.bridge.failures import EgressFailure, IngressFailure
    from caravel.bridge.ingress import BrokerConsumer
    from caravel.bridge.messages import Destination, IncomingMessage, OutgoingMessage
    from caravel.bridge.ports import Broker, Delivery, Publisher, Refused, Subscription
    from caravel.bridge.routing import EgressRoutes, IngressRoute, IngressRoutes

__all__ = [
    "Broker",
    "BrokerConsumer",
    "BrokerRelay",
    "Delivery",
    "Destination",
    "EgressFailure",
    "EgressRoutes",
    "IncomingMessage",
    "IngressFailure",
    "IngressRoute",
    "IngressRoutes",
    "OutgoingMessage",
    "Publisher",
    "Refused",
    "Subscription",
    "open_broker",
]

_HOMES = {
    "open_broker": "caravel.bridge.brokers",
    "BrokerRelay": "caravel.bridge.egress",
    "EgressFailure": "caravel.bridge.failures",
    "IngressFailure": "caravel.bridge.failures",
    "BrokerConsumer": "caravel.bridge.ingress",
    "Destination": "caravel.bridge.messages",
    "IncomingMessage": "caravel.bridge.messages",
    "OutgoingMessage": "caravel.bridge.messages",
    "Broker": "caravel.bridge.ports",
    "Delivery": "caravel.bridge.ports",
    "Publisher": "caravel.bridge.ports",
    "Refused": "caravel.bridge.ports",
    "Subscription": "caravel.bridge.ports",
    "EgressRoutes": "caravel.bridge.routing",
    "IngressRoute": "caravel.bridge.routing",
    "IngressRoutes": "caravel.bridge.routing",
}

__getattr__ = lazy_attributes("caravel.bridge", globals(), _HOMES)
