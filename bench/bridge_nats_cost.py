"""The broker bridges against NATS JetStream's own rates, in the same run on the same machine.

The NATS side of ``python -m bench --only bridge`` (:mod:`bench.bridge_cost` is RabbitMQ's):
four figures, each over ``jobs`` messages on a fresh stream of the local server
(``CARAVEL_BENCH_NATS_URL``, by default ``nats://127.0.0.1:4222``):

- ``raw_publish``: nats-py alone publishing with JetStream, ``Nats-Msg-Id`` set, ``batch`` at a
  time and every PubAck awaited (what the relay does per pass);
- ``egress``: :class:`~caravel.bridge.BrokerRelay` publishing as many committed outbox intents
  (staged beforehand) through the JetStream adapter, and recording each pass;
- ``raw_consume``: nats-py alone reading them from a durable pull consumer, ``batch`` per fetch,
  one ``ack`` per message (``max_ack_pending`` = ``prefetch``);
- ``ingress``: :class:`~caravel.bridge.BrokerConsumer` turning as many messages into jobs through
  the adapter, each validated, inserted in the pass's transaction and acknowledged after it
  committed.

``egress_share`` and ``ingress_share`` are the bridge's rate over the raw one (the issue's aim:
0.5 or more). ``python -m bench.bridge_nats_cost [jobs]`` runs it alone (SQLite and
PostgreSQL).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
import uuid
from typing import Any

import nats
from nats.js.api import AckPolicy, ConsumerConfig

from bench.apps import registry
from bench.bridge_cost import TABLE, _body, _stage
from caravel import DatabaseQueue
from caravel.bridge import (
    BrokerConsumer,
    BrokerRelay,
    Destination,
    EgressRoutes,
    IngressRoute,
    IngressRoutes,
)
from caravel.bridge.nats import open_broker

NATS_URL = os.environ.get("CARAVEL_BENCH_NATS_URL", "nats://127.0.0.1:4222")


async def _raw_publish(subject: str, jobs: int, batch: int) -> float:
    connection = await nats.connect(NATS_URL)
    try:
        js = connection.jetstream()
        started = time.perf_counter()
        for first in range(0, jobs, batch):
            acks = [
                await js.publish_async(
                    subject,
                    _body(i),
                    headers={"Nats-Msg-Id": f"raw-{i}", "caravel-tenant": "bench"},
                )
                for i in range(first, min(jobs, first + batch))
            ]
            await asyncio.gather(*acks)
        return time.perf_counter() - started
    finally:
        await connection.close()


async def _raw_consume(stream: str, jobs: int, batch: int, prefetch: int) -> float:
    connection = await nats.connect(NATS_URL)
    try:
        js = connection.jetstream()
        config = ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, max_ack_pending=prefetch)
        subscription = await js.pull_subscribe(f"{stream}.raw", "raw", stream=stream, config=config)
        seen = 0
        started = time.perf_counter()
        while seen < jobs:
            for message in await subscription.fetch(min(batch, prefetch), timeout=5):
                await message.ack()
                seen += 1
        await connection.flush()
        return time.perf_counter() - started
    finally:
        await connection.close()


async def _egress(url: str, broker: Any, subject: str, jobs: int, batch: int) -> float:
    await asyncio.to_thread(_stage, url, jobs)
    relay = BrokerRelay(
        url,
        await broker.publisher(),
        EgressRoutes(default=Destination(subject)),
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
    return elapsed


async def _ingress(
    url: str, broker: Any, stream: str, jobs: int, batch: int, prefetch: int
) -> float:
    async with DatabaseQueue(url, registry) as caravel_queue:
        subscription = await broker.subscribe(f"{stream}:bridge", max_in_flight=prefetch)
        routes = IngressRoutes(registry, [IngressRoute(">", "bench.noop.v1", "bench")])
        consumer = BrokerConsumer(caravel_queue, subscription, routes, batch_size=batch)
        started = time.perf_counter()
        while consumer.created < jobs:
            await consumer.run_once()
        elapsed = time.perf_counter() - started
        await subscription.close()
    return elapsed


async def _delete(stream: str) -> None:
    connection = await nats.connect(NATS_URL)
    try:
        js = connection.jetstream()
        for name in (stream, f"{stream}_DLQ"):
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await js.delete_stream(name)
    finally:
        await connection.close()


async def measure(url: str, jobs: int, batch: int = 500, prefetch: int = 1000) -> dict[str, Any]:
    """The four rates (messages per second) and the two shares, on the migrated, empty queue
    database ``url``."""
    stream = f"BENCH_{uuid.uuid4().hex[:8]}"
    # The consumer reads <stream>.bridge only; its dead letters would go to a subject outside.
    broker = await open_broker(
        NATS_URL,
        stream=stream,
        subjects=(f"{stream}.raw", f"{stream}.bridge"),
        filter_subject=f"{stream}.bridge",
        dead_letter_subject=f"{stream}-dlq",
    )
    try:
        raw_publish = await _raw_publish(f"{stream}.raw", jobs, batch)
        raw_consume = await _raw_consume(stream, jobs, batch, prefetch)
        egress = await _egress(url, broker, f"{stream}.bridge", jobs, batch)
        ingress = await _ingress(url, broker, stream, jobs, batch, prefetch)
    finally:
        await broker.close()
        await _delete(stream)
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
