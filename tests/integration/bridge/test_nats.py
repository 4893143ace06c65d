"""The bridges over NATS JetStream, on the shared NATS server and every database: egress publishes
every committed intent with ``Nats-Msg-Id`` and records it only after its PubAck, a re-send is
dropped by the stream's duplicate window; ingress makes exactly one job per message, redelivery
included, acknowledges only what committed, and dead-letters bad input with its category while
it keeps going."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator

import pytest
import sqlalchemy as sa

from caravel import DatabaseQueue, DispatchOptions
from caravel.bridge import (
    BrokerConsumer,
    BrokerRelay,
    Destination,
    EgressRoutes,
    IngressRoute,
    IngressRoutes,
    OutgoingMessage,
)
from caravel.bridge.failures import HEADER_FAILURE
from caravel.bridge.messages import HEADER_JOB_TYPE, HEADER_QUEUE, HEADER_TENANT
from caravel.bridge.nats import HEADER_MSG_ID, JetStreamBroker, open_broker
from caravel.errors import BrokerError, OptionsError
from caravel.store.schema import jobs
from tests.support import Add, dispatch, open_queue
from tests.support.bridge_app import OutboxApp, outbox_app, sync_url_of
from tests.support.jetstream import (
    ScratchNames,
    consumer_info,
    delete_stream,
    read_stream,
    require_nats,
    scratch_names,
)

pytestmark = pytest.mark.slow


@pytest.fixture
def names() -> Iterator[ScratchNames]:
    url = require_nats()
    scratch = scratch_names("bridge")
    yield scratch
    delete_stream(url, scratch.stream)
    delete_stream(url, f"{scratch.stream}_DLQ")


@pytest.fixture
async def broker(names: ScratchNames) -> AsyncIterator[JetStreamBroker]:
    connected = await open_broker(
        require_nats(), stream=names.stream, subjects=(names.subject("*"),)
    )
    try:
        yield connected
    finally:
        await connected.close()


@pytest.fixture
def app(db_url: str) -> Iterator[OutboxApp]:
    with outbox_app(db_url) as made:
        yield made


def _count_jobs(db_url: str) -> list[tuple[str | None, str]]:
    engine = sa.create_engine(sync_url_of(db_url))
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.select(jobs.c.idempotency_key, jobs.c.tenant_id)).all()
    finally:
        engine.dispose()
    return [(key, tenant) for key, tenant in rows]


# ----- egress ------------------------------------------------------------------------------


async def test_every_intent_is_published_once_with_its_id_and_headers(
    app: OutboxApp, broker: JetStreamBroker, names: ScratchNames
) -> None:
    staged = app.stage([Add(i, note="n") for i in range(40)], dispatch(queue="billing"))
    routes = EgressRoutes(default=Destination(names.subject("jobs")))
    relay = BrokerRelay(app.async_url, await broker.publisher(), routes, table_name=app.table)
    try:
        assert await relay.run_once() == 40
        assert await relay.run_once() == 0
    finally:
        await relay.close()
    assert app.pending() == []
    messages = await read_stream(require_nats(), names.stream)
    assert sorted(m.headers[HEADER_MSG_ID] for m in messages) == sorted(str(i) for i in staged)
    first = min(messages, key=lambda m: json.loads(m.data)["amount"])
    assert first.headers[HEADER_TENANT] == "tenant-a"
    assert first.headers[HEADER_JOB_TYPE] == "tests.add.v1"
    assert first.headers[HEADER_QUEUE] == "billing"
    assert json.loads(first.data) == {"amount": 0, "note": "n"}


async def test_a_resend_after_a_crash_is_dropped_by_the_duplicate_window(
    broker: JetStreamBroker, names: ScratchNames
) -> None:
    publisher = await broker.publisher()
    batch = [OutgoingMessage(f"m-{i}", Destination(names.subject("jobs")), b"{}") for i in range(5)]
    assert await publisher.publish(batch) == []
    # The relay died after the PubAcks and before its record: it sends them all again.
    assert await publisher.publish(batch) == []
    messages = await read_stream(require_nats(), names.stream)
    assert [m.headers[HEADER_MSG_ID] for m in messages] == [f"m-{i}" for i in range(5)]


async def test_an_intent_no_stream_captures_stays_pending_as_unroutable(
    app: OutboxApp, broker: JetStreamBroker, names: ScratchNames
) -> None:
    app.stage([Add(1)], dispatch())
    routes = EgressRoutes(default=Destination(f"nowhere-{names.prefix}"))
    relay = BrokerRelay(app.async_url, await broker.publisher(), routes, table_name=app.table)
    try:
        assert await relay.run_once() == 0
    finally:
        await relay.close()
    assert [row.relay_failure for row in app.pending()] == ["Unroutable"]


async def test_nothing_is_recorded_when_no_pub_ack_comes(
    app: OutboxApp, names: ScratchNames
) -> None:
    app.stage([Add(1), Add(2)], dispatch())
    broker = await open_broker(require_nats(), stream=names.stream, subjects=(names.subject("*"),))
    publisher = await broker.publisher()
    await broker.close()  # the connection is gone before the pass publishes
    routes = EgressRoutes(default=Destination(names.subject("jobs")))
    relay = BrokerRelay(app.async_url, publisher, routes, table_name=app.table)
    try:
        with pytest.raises(BrokerError, match="publish"):
            await relay.run_once()
    finally:
        await relay.close()
    assert len(app.pending()) == 2
    assert all(row.relay_failure is None for row in app.pending())


# ----- ingress -----------------------------------------------------------------------------


async def _publish(broker: JetStreamBroker, *messages: OutgoingMessage) -> None:
    assert await (await broker.publisher()).publish(list(messages)) == []


def _good(names: ScratchNames, i: int, tenant: str = "tenant-b") -> OutgoingMessage:
    body = json.dumps({"amount": i}).encode()
    return OutgoingMessage(
        f"in-{i}", Destination(names.subject("add")), body, {HEADER_TENANT: tenant}
    )


def _routes(queue: DatabaseQueue, names: ScratchNames) -> IngressRoutes:
    return IngressRoutes(queue.registry, [IngressRoute(names.subject("add"), "tests.add.v1", "in")])


async def _drain(consumer: BrokerConsumer) -> None:
    while (await consumer.run_once()).settled:
        pass


async def test_each_message_becomes_one_job_and_is_acked_after_the_commit(
    db_url: str, broker: JetStreamBroker, names: ScratchNames
) -> None:
    await _publish(broker, *[_good(names, i) for i in range(30)])
    async with open_queue(db_url) as queue:
        subscription = await broker.subscribe(f"{names.stream}:{names.durable}", max_in_flight=8)
        consumer = BrokerConsumer(queue, subscription, _routes(queue, names), batch_size=8)
        try:
            await _drain(consumer)
        finally:
            await subscription.close()
        assert (consumer.created, consumer.repeated, consumer.rejected) == (30, 0, 0)
    assert sorted(_count_jobs(db_url)) == sorted((f"in-{i}", "tenant-b") for i in range(30))
    info = await consumer_info(require_nats(), names.stream, names.durable)
    assert (info.num_ack_pending, info.num_pending) == (0, 0)
    assert info.config.max_ack_pending == 8  # the in-flight bound is the server's backpressure


async def test_a_redelivered_message_finds_its_job(
    db_url: str, broker: JetStreamBroker, names: ScratchNames
) -> None:
    await _publish(broker, *[_good(names, i) for i in range(6)])
    source = f"{names.stream}:{names.durable}"
    async with open_queue(db_url) as queue:
        # A first consumer committed the jobs of three and died before acknowledging: the broker
        # has them unsettled, the database has their jobs.
        first = await broker.subscribe(source, max_in_flight=3)
        taken = await first.fetch(3, 5)
        assert len(taken) == 3
        for delivery in taken:
            key = delivery.message.message_id
            job = Add(json.loads(delivery.message.body)["amount"])
            await queue.enqueue(
                job, DispatchOptions(queue="in", tenant_id="tenant-b", idempotency_key=key)
            )
        await first.close()  # hands them back, as the server does after ack_wait
        second = await broker.subscribe(source, max_in_flight=10)
        consumer = BrokerConsumer(queue, second, _routes(queue, names))
        try:
            await _drain(consumer)
        finally:
            await second.close()
        assert (consumer.created, consumer.repeated) == (3, 3)
    assert len(_count_jobs(db_url)) == 6


async def test_bad_input_goes_to_the_dead_letter_subject_and_the_consumer_goes_on(
    db_url: str, broker: JetStreamBroker, names: ScratchNames
) -> None:
    add = Destination(names.subject("add"))
    tenant = {HEADER_TENANT: "tenant-b"}
    await _publish(
        broker,
        _good(names, 1),
        OutgoingMessage("bad-json", add, b"{not json", tenant),
        OutgoingMessage("bad-type", Destination(names.subject("unknown")), b"{}", tenant),
        OutgoingMessage(
            "bad-size", add, json.dumps({"amount": 1, "note": "x" * 2000}).encode(), tenant
        ),
        OutgoingMessage("bad-tenant", add, b'{"amount": 2}'),
        _good(names, 2),
    )
    async with open_queue(db_url, max_payload_bytes=1000) as queue:
        subscription = await broker.subscribe(f"{names.stream}:{names.durable}", max_in_flight=2)
        routes = IngressRoutes(
            queue.registry, [IngressRoute(names.subject("add"), "tests.add.v1", "in")]
        )
        consumer = BrokerConsumer(queue, subscription, routes)
        try:
            await _drain(consumer)
        finally:
            await subscription.close()
        assert (consumer.created, consumer.rejected) == (2, 4)
    assert sorted(key for key, _ in _count_jobs(db_url)) == ["in-1", "in-2"]
    dead = await read_stream(require_nats(), f"{names.stream}_DLQ")
    categories = {m.headers[HEADER_MSG_ID]: m.headers[HEADER_FAILURE] for m in dead}
    assert categories == {
        "bad-json": "MalformedJson",
        "bad-type": "UnknownJobType",
        "bad-size": "PayloadTooLarge",
        "bad-tenant": "MissingTenant",
    }
    assert {m.subject for m in dead} == {names.subject("add.dlq"), names.subject("unknown.dlq")}
    info = await consumer_info(require_nats(), names.stream, names.durable)
    assert (info.num_ack_pending, info.num_pending, info.num_redelivered) == (0, 0, 0)


async def test_a_dead_letter_subject_the_consumer_reads_is_refused(names: ScratchNames) -> None:
    # The stream captures prefix.>, so prefix.add.dlq would come back to its consumer.
    everything = (names.subject(">"),)
    broker = await open_broker(require_nats(), stream=names.stream, subjects=everything)
    try:
        with pytest.raises(OptionsError, match="dead_letter_subject"):
            await broker.subscribe(f"{names.stream}:{names.durable}", max_in_flight=5)
        # Outside what it reads, it is taken.
        elsewhere = await open_broker(require_nats(), dead_letter_subject=f"dlq-{names.prefix}")
        try:
            source = f"{names.stream}:{names.durable}"
            await (await elsewhere.subscribe(source, max_in_flight=5)).close()
        finally:
            await elsewhere.close()
    finally:
        await broker.close()
