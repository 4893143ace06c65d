"""The shared RabbitMQ server (``127.0.0.1:5672``, guest/guest; ``CARAVEL_TEST_RABBITMQ_URL`` to
use another) for the bridge's tests: unreachable fails under ``CI=true`` and skips elsewhere, as
the databases do. Every test works in names of its own (:class:`Names`) and deletes them after,
so tests on several pytest-xdist workers share the server without meeting.

The raw helpers here use aio-pika directly, as a peer application would, never the bridge
under test."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import aio_pika
import pytest

from tests.support.databases import IN_CI

__all__ = [
    "RABBITMQ_URL",
    "Names",
    "RawMessage",
    "close_connections_of",
    "count",
    "exists",
    "fresh_names",
    "publish_raw",
    "rabbitmq_available",
    "read_all",
]

RABBITMQ_URL = os.environ.get("CARAVEL_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/")


def rabbitmq_available() -> None:
    """Skip (fail under ``CI=true``) unless the server answers."""

    async def probe() -> None:
        connection = await aio_pika.connect(RABBITMQ_URL, timeout=5)
        await connection.close()

    try:
        asyncio.run(probe())
    except Exception as exc:
        message = f"RabbitMQ is not reachable at {RABBITMQ_URL} ({type(exc).__name__})"
        if IN_CI:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


@dataclass
class Names:
    """Exchange and queue names unique to one test, deleted by :meth:`cleanup`."""

    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:10])

    @property
    def exchange(self) -> str:
        return f"test-{self.tag}.events"

    @property
    def queue(self) -> str:
        return f"test-{self.tag}.jobs"

    @property
    def dead_letters(self) -> str:
        return f"{self.queue}.dead-letter"

    @property
    def dead_letter_exchange(self) -> str:
        return f"{self.queue}.dlx"

    async def declare_sink(self, pattern: str = "#") -> None:
        """A queue of this test's bound to its exchange (what a peer consumer would have), so
        egress has somewhere to route to."""
        connection = await aio_pika.connect(RABBITMQ_URL)
        async with connection:
            channel = await connection.channel()
            exchange = await channel.declare_exchange(
                self.exchange, aio_pika.ExchangeType.TOPIC, durable=True
            )
            sink = await channel.declare_queue(f"test-{self.tag}.sink", durable=True)
            await sink.bind(exchange, routing_key=pattern)

    @property
    def sink(self) -> str:
        return f"test-{self.tag}.sink"

    async def cleanup(self) -> None:
        connection = await aio_pika.connect(RABBITMQ_URL)
        async with connection:
            for queue in (self.queue, self.dead_letters, self.sink):
                channel = await connection.channel()
                with suppress(aio_pika.exceptions.AMQPError):
                    await channel.queue_delete(queue)
            for exchange in (self.exchange, self.dead_letter_exchange):
                channel = await connection.channel()
                with suppress(aio_pika.exceptions.AMQPError):
                    await channel.exchange_delete(exchange)


@dataclass(frozen=True)
class RawMessage:
    message_id: str | None
    body: bytes
    headers: Mapping[str, Any]
    routing_key: str
    delivery_mode: int | None

    def json(self) -> Any:
        return json.loads(self.body)


async def read_all(queue: str, *, settle: float = 0.2) -> list[RawMessage]:
    """Every message now in ``queue``, taken off it (acknowledged), oldest first."""
    found: list[RawMessage] = []
    connection = await aio_pika.connect(RABBITMQ_URL)
    async with connection:
        channel = await connection.channel()
        source = await channel.declare_queue(queue, passive=True)
        idle = 0.0
        while idle < settle:
            message = await source.get(fail=False)
            if message is None:
                await asyncio.sleep(0.05)
                idle += 0.05
                continue
            idle = 0.0
            headers = {
                k: v.decode() if isinstance(v, bytes) else v
                for k, v in (message.headers or {}).items()
            }
            found.append(
                RawMessage(
                    message.message_id,
                    message.body,
                    headers,
                    message.routing_key or "",
                    message.delivery_mode,
                )
            )
            await message.ack()
    return found


def exists(queue: str) -> bool:
    """Whether the server has ``queue`` (declared by a process under test, say)."""
    try:
        asyncio.run(count(queue))
    except aio_pika.exceptions.AMQPError:
        return False
    return True


async def count(queue: str) -> int:
    """How many messages ``queue`` holds ready (not delivered to a consumer)."""
    connection = await aio_pika.connect(RABBITMQ_URL)
    async with connection:
        channel = await connection.channel()
        declared = await channel.declare_queue(queue, passive=True)
        return int(declared.declaration_result.message_count or 0)


async def publish_raw(
    exchange: str,
    messages: Sequence[tuple[str, str | None, bytes, Mapping[str, str]]],
) -> None:
    """Publish ``(routing_key, message_id, body, headers)`` messages, confirmed, as a peer
    application would."""
    connection = await aio_pika.connect(RABBITMQ_URL)
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        target = await channel.declare_exchange(exchange, aio_pika.ExchangeType.TOPIC, durable=True)
        await asyncio.gather(
            *(
                target.publish(
                    aio_pika.Message(
                        body,
                        message_id=message_id,
                        headers=dict(headers),
                        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                    ),
                    routing_key=key,
                )
                for key, message_id, body, headers in messages
            )
        )


@contextmanager
def fresh_names() -> Iterator[Names]:
    """Names of a test's own on a server that answers (skipped, or failing under ``CI=true``,
    otherwise), deleted afterwards: for tests outside an event loop."""
    rabbitmq_available()
    made = Names()
    try:
        yield made
    finally:
        asyncio.run(made.cleanup())


def close_connections_of(pid: int) -> int:
    """Close, on the server, every connection the process ``pid`` opened through the bridge
    (named ``caravel-bridge HOST:PID``): a connection reset as the client sees it. Returns how
    many it closed. Never touches another process's connections."""
    # The plain listing: its pids are in the form close_connection takes (the JSON one's are
    # not), one connection a line, the connection name quoted inside the properties.
    listed = subprocess.run(
        ["rabbitmqctl", "-q", "--no-table-headers", "list_connections", "pid", "client_properties"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    closed = 0
    for line in listed.stdout.splitlines():
        connection, _, properties = line.partition("\t")
        match = re.search(r'\{"connection_name","caravel-bridge [^":]*:(\d+)"\}', properties)
        if match is None or int(match.group(1)) != pid:
            continue
        done = subprocess.run(
            ["rabbitmqctl", "-q", "close_connection", connection, "test: reset"],
            capture_output=True,
            timeout=60,
            check=False,
        )
        closed += done.returncode == 0  # not when it closed meanwhile
    return closed


def held(queue: str) -> int:
    """How many messages ``queue`` holds, ready or delivered and not yet acknowledged (the
    server's own count, which a passive declare does not give)."""
    listed = subprocess.run(
        ["rabbitmqctl", "-q", "list_queues", "name", "messages", "--formatter", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    for entry in json.loads(listed.stdout or "[]"):
        if entry["name"] == queue:
            return int(entry["messages"])
    raise AssertionError(f"no queue {queue}")
