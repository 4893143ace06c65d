"""One bridge process over NATS JetStream, for the fault tests to kill: ``egress`` relays an
outbox table to a subject, ``ingress`` turns a durable consumer's messages into ``tests.add.v1``
jobs in the queue ``in``. Both run until SIGTERM, riding out broker outages;
``CARAVEL_FAILPOINT`` (``bridge_after_confirm``, ``bridge_after_commit``) kills them at the
point under test.

    python -m tests.faults.bridge_nats_app egress BROKER APP_URL TABLE SUBJECT
    python -m tests.faults.bridge_nats_app ingress BROKER QUEUE_URL STREAM:DURABLE SUBJECT
"""

from __future__ import annotations

import asyncio
import signal
import sys
from datetime import timedelta

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
from tests.support import make_registry

#: Small batches, so that a kill lands between passes of one run, and short waits, so that a
#: killed consumer's deliveries come back within the test's time.
BATCH = 20
OUTAGE = timedelta(minutes=2)
OPTIONS = {"ack_wait": timedelta(seconds=2), "publish_timeout": timedelta(seconds=2)}


async def egress(broker_url: str, app_url: str, table: str, subject: str) -> None:
    broker = await open_broker(broker_url, **OPTIONS)
    relay = BrokerRelay(
        app_url,
        await broker.publisher(),
        EgressRoutes(default=Destination(subject)),
        table_name=table,
        batch_size=BATCH,
        poll_interval=timedelta(milliseconds=50),
        outage_window=OUTAGE,
    )
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, relay.stop)
    print("publishing", flush=True)
    try:
        await relay.run()
    finally:
        await relay.close()
        await broker.close()


async def ingress(broker_url: str, queue_url: str, source: str, subject: str) -> None:
    registry = make_registry()
    async with DatabaseQueue(queue_url, registry) as queue:
        broker = await open_broker(broker_url, **OPTIONS)
        subscription = await broker.subscribe(source, max_in_flight=BATCH)
        routes = IngressRoutes(registry, [IngressRoute(subject, "tests.add.v1", "in")])
        consumer = BrokerConsumer(
            queue,
            subscription,
            routes,
            batch_size=BATCH,
            fetch_timeout=timedelta(milliseconds=200),
            outage_window=OUTAGE,
        )
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, consumer.stop)
        print("consuming", flush=True)
        try:
            await consumer.run()
        finally:
            await subscription.close()
            await broker.close()


def main(argv: list[str]) -> None:
    command, *args = argv
    runs = {"egress": egress, "ingress": ingress}
    asyncio.run(runs[command](*args))


if __name__ == "__main__":
    main(sys.argv[1:])
