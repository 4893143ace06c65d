"""Opening a broker by its URL: the scheme picks the adapter, imported only then, so
``import caravel`` never loads a broker client and a missing client names the extra to install.
"""

from __future__ import annotations

import importlib
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from caravel.bridge.ports import Broker
from caravel.errors import ValidationError

__all__ = ["ADAPTERS", "check_broker_url", "open_broker", "redacted"]

#: URL scheme -> (adapter module, the extra that installs its client, the client's module).
#: Each adapter module has ``async def open_broker(url: str, **options) -> Broker``.
ADAPTERS: dict[str, tuple[str, str, str]] = {
    "amqp": ("caravel.bridge.rabbitmq", "rabbitmq", "aio_pika"),
    "amqps": ("caravel.bridge.rabbitmq", "rabbitmq", "aio_pika"),
    "nats": ("caravel.bridge.nats", "nats", "nats"),
    "tls": ("caravel.bridge.nats", "nats", "nats"),
}


def redacted(url: str) -> str:
    """``url`` without its user name and password (for logs, errors and progress lines)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def check_broker_url(url: str) -> str:
    """The adapter module for ``url``; :class:`~caravel.errors.ValidationError` (field
    ``broker``) unless its scheme names an adapter whose client is installed. Imports the
    client only; connects to nothing."""
    scheme = urlsplit(url).scheme.lower() if isinstance(url, str) else ""
    adapter = ADAPTERS.get(scheme)
    if adapter is None:
        known = ", ".join(f"{name}://" for name in sorted(ADAPTERS))
        raise ValidationError("broker", f"must be a broker URL starting with one of {known}")
    module, extra, client = adapter
    try:
        importlib.import_module(client)
    except ImportError:
        raise ValidationError(
            "broker", f"{scheme}:// needs the {extra!r} extra: pip install 'caravel-queue[{extra}]'"
        ) from None
    return module


async def open_broker(url: str, **options: Any) -> Broker:
    """Connect to the broker at ``url`` (``amqp://``, ``amqps://``: RabbitMQ; ``nats://``,
    ``tls://``: NATS JetStream) with the adapter's ``options``. Raises
    :class:`~caravel.errors.ValidationError` for an unknown scheme or a missing extra, and
    :class:`~caravel.errors.BrokerError` when the broker cannot be reached."""
    adapter = importlib.import_module(check_broker_url(url))  # a module of the table above
    broker: Broker = await adapter.open_broker(url, **options)
    return broker
