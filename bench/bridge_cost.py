"""The broker bridges against RabbitMQ's own rates, in the same run on the same machine.

Four figures, each over ``jobs`` messages on fresh queues of the local server
(``CARAVEL_BENCH_RABBITMQ_URL``, by default ``amqp://guest:guest@127.0.0.1:5672/``):

- ``raw_publish``: aio-pika alone publishing persistent messages with confirms, ``batch`` at a
  time awaited together (what the relay does per pass), to a queue on the default exchange;
- ``egress``: :class:`~caravel.bridge.BrokerRelay` publishing as many committed outbox intents
  (staged beforehand in an outbox table in the bench database) with the same confirms, and
  recording each pass;
- ``raw_consume``: aio-pika alone consuming them with manual acknowledgements and a prefetch of
  ``prefetch``, one cumulative ``ack`` per ``batch`` messages (as the bridge settles a pass);
- ``ingress``: :class:`~caravel.bridge.BrokerConsumer` turning as many messages into jobs, each
  validated, inserted in the pass's transaction and acknowledged after it committed.

``egress_share`` and ``ingress_share`` are the bridge's rate over the raw one (the issue's aim:
0.5 or more). Run it with ``python -m bench --only bridge`` or ``python -m bench.bridge_cost
[jobs]`` (SQLite and PostgreSQL).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from typing import Any

import aio_pika
import sqlalchemy as sa
from sqlalchemy.orm import Session

from bench.apps import Noop, registry
from caravel import DatabaseQueue, DispatchOptions
from caravel.bridge import (
    BrokerConsumer,
    BrokerRelay,
    Destination,
    EgressRoutes,
    IngressRoute,
    IngressRoutes,
    open_broker,
)
from caravel.outbox import Outbox, add_outbox
from caravel.store.urls import sync_url

RABBITMQ_URL = os.environ.get("CARAVEL_BENCH_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/")
TABLE = "bench_broker_outbox"
_metadata = sa.MetaData()
_Envelope = add_outbox(_metadata, name=TABLE)


def _body(i: int) -> bytes:
    return json.dumps({"n": i}, separators=(",", ":")).encode()


async def _raw_publish(queue: str, jobs: int, batch: int) -> float:
    connection = await aio_pika.connect(RABBITMQ_URL)
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        await channel.declare_queue(queue, durable=True)
        exchange = channel.default_exchange
        started = time.perf_counter()
        for first in range(0, jobs, batch):
            await asyncio.gather(
                *(
                    exchange.publish(
                        aio_pika.Message(
                            _body(i),
                            message_id=f"raw-{i}",
                            headers={"caravel-tenant": "bench"},
                            content_type="application/json",
                            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                        ),
                        routing_key=queue,
                        mandatory=True,
                    )
                    for i in range(first, min(jobs, first + batch))
                )
            )
        return time.perf_counter() - started


async def _raw_consume(queue: str, jobs: int, prefetch: int, batch: int) -> float:
    connection = await aio_pika.connect(RABBITMQ_URL)
    async with connection:
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=prefetch)
        source = await channel.declare_queue(queue, durable=True)
        done = asyncio.Event()
        seen = 0

        async def take(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            nonlocal seen
            seen += 1
            if seen % batch == 0 or seen >= jobs:
                await message.ack(multiple=True)  # this one and every one before it
            if seen >= jobs:
                done.set()

        started = time.perf_counter()
        tag = await source.consume(take)
        await done.wait()
        elapsed = time.perf_counter() - started
        await source.cancel(tag)
        return elapsed


def _stage(url: str, jobs: int) -> None:
    engine = sa.create_engine(sync_url(url), poolclass=sa.pool.NullPool)
    try:
        _metadata.create_all(engine)
        box = Outbox(registry, _Envelope)
        for first in range(0, jobs, 1000):
            with Session(engine) as session:
                for i in range(first, min(jobs, first + 1000)):
                    box.stage(session, Noop(i), DispatchOptions(queue="bench", tenant_id="bench"))
                session.commit()
    finally:
        engine.dispose()


async def _egress(url: str, queue: str, jobs: int, batch: int) -> float:
    await asyncio.to_thread(_stage, url, jobs)
    broker = await open_broker(RABBITMQ_URL)
    try:
        relay = BrokerRelay(
            url,
            await broker.publisher(),
            EgressRoutes(default=Destination(queue)),
            table_name=TABLE,
            batch_size=batch,
        )
        try:
            started = time.perf_counter()
            while await relay.run_once():
                pass
            elapsed = time.perf_counter() - started
            assert relay.published == jobs, relay.published
        finally:
            await relay.close()
    finally:
        await broker.close()
    return elapsed


async def _ingress(url: str, queue: str, jobs: int, batch: int, prefetch: int) -> float:
    broker = await open_broker(RABBITMQ_URL, declare=False)
    try:
        async with DatabaseQueue(url, registry) as caravel_queue:
            subscription = await broker.subscribe(queue, max_in_flight=prefetch)
            routes = IngressRoutes(registry, [IngressRoute("#", "bench.noop.v1", "bench")])
            consumer = BrokerConsumer(caravel_queue, subscription, routes, batch_size=batch)
            started = time.perf_counter()
            while consumer.created < jobs:
                await consumer.run_once()
            elapsed = time.perf_counter() - started
            await subscription.close()
    finally:
        await broker.close()
    return elapsed


async def _delete(*queues: str) -> None:
    connection = await aio_pika.connect(RABBITMQ_URL)
    async with connection:
        for queue in queues:
            channel = await connection.channel()
            await channel.queue_delete(queue)


async def measure(url: str, jobs: int, batch: int = 500, prefetch: int = 1000) -> dict[str, Any]:
    """The four rates (messages per second) and the two shares, on the migrated, empty queue
    database ``url``."""
    tag = uuid.uuid4().hex[:8]
    raw, bridged = f"bench-raw-{tag}", f"bench-bridge-{tag}"
    try:
        raw_publish = await _raw_publish(raw, jobs, batch)
        raw_consume = await _raw_consume(raw, jobs, prefetch, batch)
        await _raw_publish(bridged, 0, batch)  # declares it
        egress = await _egress(url, bridged, jobs, batch)
        ingress = await _ingress(url, bridged, jobs, batch, prefetch)
    finally:
        await _delete(raw, bridged)
    rates = {
        "raw_publish_per_second": jobs / raw_publish,
        "egress_per_second": jobs / egress,
        "raw_consume_per_second": jobs / raw_consume,
        "ingress_per_second": jobs / ingress,
    }
    return {
        "jobs": jobs,
        "batch": batch,
        "prefetch": prefetch,
        **rates,
        "egress_share": rates["egress_per_second"] / rates["raw_publish_per_second"],
        "ingress_share": rates["ingress_per_second"] / rates["raw_consume_per_second"],
    }


if __name__ == "__main__":
    from bench.databases import database

    count = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    for backend in ("sqlite", "postgresql"):
        with database(backend) as bench_url:
            print(backend, json.dumps(asyncio.run(measure(bench_url, count)), indent=1))
