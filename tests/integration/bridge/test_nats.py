"""The bridges over NATS JetStream, on the shared NATS server and every database: egress publishes
every committed intent with ``Nats-Msg-Id`` and records it only after its PubAck, a re-send is
dropped by the stream's duplicate window; ingress makes exactly one job per message, redelivery
included, acknowledges only what committed, and dead-letters bad input with its category while
it keeps going."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator

import pytest

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
from tests.support import Add, dispatch, make_registry, open_queue
from tests.support.bridge import TABLE, AppDb, queue_rows
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
def jet() -> Iterator[ScratchNames]:
    url = require_nats()
    scratch = scratch_names("bridge")
    yield scratch
    delete_stream(url, scratch.stream)
    delete_stream(url, f"{scratch.stream}_DLQ")


@pytest.fixture
async def broker(jet: ScratchNames) -> AsyncIterator[JetStreamBroker]:
    connected = await open_broker(require_nats(), stream=jet.stream, subjects=(jet.subject("*"),))
    try:
        yield connected
    finally:
        await connected.close()


def _job_keys(db_url: str) -> list[tuple[str | None, str]]:
    return [(row.idempotency_key, row.tenant_id) for row in queue_rows(db_url)]


# ----- egress ------------------------------------------------------------------------------


async def test_every_intent_is_published_once_with_its_id_and_headers(
    app_db: AppDb, broker: JetStreamBroker, jet: ScratchNames
) -> None:
    staged = app_db.stage(
        make_registry(), [(Add(i, note="n"), dispatch(queue="billing")) for i in range(40)]
    )
    routes = EgressRoutes(default=Destination(jet.subject("jobs")))
    relay = BrokerRelay(app_db.url, await broker.publisher(), routes, table_name=TABLE)
    try:
        assert await relay.run_once() == 40
        assert await relay.run_once() == 0
    finally:
        await relay.close()
    assert app_db.pending() == 0
    messages = await read_stream(require_nats(), jet.stream)
    assert sorted(m.headers[HEADER_MSG_ID] for m in messages) == sorted(str(i) for i in staged)
    first = min(messages, key=lambda m: json.loads(m.data)["amount"])
    assert first.headers[HEADER_TENANT] == "tenant-a"
    assert first.headers[HEADER_JOB_TYPE] == "tests.add.v1"
    assert first.headers[HEADER_QUEUE] == "billing"
    assert json.loads(first.data) == {"amount": 0, "note": "n"}


async def test_a_resend_after_a_crash_is_dropped_by_the_duplicate_window(
    broker: JetStreamBroker, jet: ScratchNames
) -> None:
    publisher = await broker.publisher()
    batch = [OutgoingMessage(f"m-{i}", Destination(jet.subject("jobs")), b"{}") for i in range(5)]
    assert await publisher.publish(batch) == []
    # The relay died after the PubAcks and before its record: it sends them all again.
    assert await publisher.publish(batch) == []
    messages = await read_stream(require_nats(), jet.stream)
    assert [m.headers[HEADER_MSG_ID] for m in messages] == [f"m-{i}" for i in range(5)]


async def test_an_intent_no_stream_captures_stays_pending_as_unroutable(
    app_db: AppDb, broker: JetStreamBroker, jet: ScratchNames
) -> None:
    (staged,) = app_db.stage(make_registry(), [(Add(1), dispatch())])
    routes = EgressRoutes(default=Destination(f"nowhere-{jet.prefix}"))
    relay = BrokerRelay(app_db.url, await broker.publisher(), routes, table_name=TABLE)
    try:
        assert await relay.run_once() == 0
    finally:
        await relay.close()
    envelope = app_db.envelopes()[staged]
    assert (envelope.relay_failure, envelope.dispatched_at) == ("Unroutable", None)


async def test_nothing_is_recorded_when_no_pub_ack_comes(app_db: AppDb, jet: ScratchNames) -> None:
    app_db.stage(make_registry(), [(Add(1), dispatch()), (Add(2), dispatch())])
    broker = await open_broker(require_nats(), stream=jet.stream, subjects=(jet.subject("*"),))
    publisher = await broker.publisher()
    await broker.close()  # the connection is gone before the pass publishes
    routes = EgressRoutes(default=Destination(jet.subject("jobs")))
    relay = BrokerRelay(app_db.url, publisher, routes, table_name=TABLE)
    try:
        with pytest.raises(BrokerError, match="publish"):
            await relay.run_once()
    finally:
        await relay.close()
    assert app_db.pending() == 2
    assert all(row.relay_failure is None for row in app_db.envelopes().values())


# ----- ingress -----------------------------------------------------------------------------


async def _publish(broker: JetStreamBroker, *messages: OutgoingMessage) -> None:
    assert await (await broker.publisher()).publish(list(messages)) == []


def _good(jet: ScratchNames, i: int, tenant: str = "tenant-b") -> OutgoingMessage:
    body = json.dumps({"amount": i}).encode()
    return OutgoingMessage(
        f"in-{i}", Destination(jet.subject("add")), body, {HEADER_TENANT: tenant}
    )


def _routes(queue: DatabaseQueue, jet: ScratchNames) -> IngressRoutes:
    return IngressRoutes(queue.registry, [IngressRoute(jet.subject("add"), "tests.add.v1", "in")])


async def _drain(consumer: BrokerConsumer) -> None:
    while (await consumer.run_once()).settled:
        pass


async def test_each_message_becomes_one_job_and_is_acked_after_the_commit(
    db_url: str, broker: JetStreamBroker, jet: ScratchNames
) -> None:
    await _publish(broker, *[_good(jet, i) for i in range(30)])
    async with open_queue(db_url) as queue:
        subscription = await broker.subscribe(f"{jet.stream}:{jet.durable}", max_in_flight=8)
        consumer = BrokerConsumer(queue, subscription, _routes(queue, jet), batch_size=8)
        try:
            await _drain(consumer)
        finally:
            await subscription.close()
        assert (consumer.created, consumer.repeated, consumer.rejected) == (30, 0, 0)
    assert sorted(_job_keys(db_url)) == sorted((f"in-{i}", "tenant-b") for i in range(30))
    info = await consumer_info(require_nats(), jet.stream, jet.durable)
    assert (info.num_ack_pending, info.num_pending) == (0, 0)
    assert info.config.max_ack_pending == 8  # the in-flight bound is the server's backpressure


async def test_a_redelivered_message_finds_its_job(
    db_url: str, broker: JetStreamBroker, jet: ScratchNames
) -> None:
    await _publish(broker, *[_good(jet, i) for i in range(6)])
    source = f"{jet.stream}:{jet.durable}"
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
        consumer = BrokerConsumer(queue, second, _routes(queue, jet))
        try:
            await _drain(consumer)
        finally:
            await second.close()
        assert (consumer.created, consumer.repeated) == (3, 3)
    assert len(_job_keys(db_url)) == 6


async def test_bad_input_goes_to_the_dead_letter_subject_and_the_consumer_goes_on(
    db_url: str, broker: JetStreamBroker, jet: ScratchNames
) -> None:
    add = Destination(jet.subject("add"))
    tenant = {HEADER_TENANT: "tenant-b"}
    await _publish(
        broker,
        _good(jet, 1),
        OutgoingMessage("bad-json", add, b"{not json", tenant),
        OutgoingMessage("bad-type", Destination(jet.subject("unknown")), b"{}", tenant),
        OutgoingMessage(
            "bad-size", add, json.dumps({"amount": 1, "note": "x" * 2000}).encode(), tenant
        ),
        OutgoingMessage("bad-tenant", add, b'{"amount": 2}'),
        _good(jet, 2),
    )
    async with open_queue(db_url, max_payload_bytes=1000) as queue:
        subscription = await broker.subscribe(f"{jet.stream}:{jet.durable}", max_in_flight=2)
        routes = IngressRoutes(
            queue.registry, [IngressRoute(jet.subject("add"), "tests.add.v1", "in")]
        )
        consumer = BrokerConsumer(queue, subscription, routes)
        try:
            await _drain(consumer)
        finally:
            await subscription.close()
        assert (consumer.created, consumer.rejected) == (2, 4)
    assert sorted(key for key, _ in _job_keys(db_url)) == ["in-1", "in-2"]
    dead = await read_stream(require_nats(), f"{jet.stream}_DLQ")
    categories = {m.headers[HEADER_MSG_ID]: m.headers[HEADER_FAILURE] for m in dead}
    assert categories == {
        "bad-json": "MalformedJson",
        "bad-type": "UnknownJobType",
        "bad-size": "PayloadTooLarge",
        "bad-tenant": "MissingTenant",
    }
    assert {m.subject for m in dead} == {jet.subject("add.dlq"), jet.subject("unknown.dlq")}
    info = await consumer_info(require_nats(), jet.stream, jet.durable)
    assert (info.num_ack_pending, info.num_pending, info.num_redelivered) == (0, 0, 0)


async def test_a_dead_letter_subject_the_consumer_reads_is_refused(jet: ScratchNames) -> None:
    # The stream captures prefix.>, so prefix.add.dlq would come back to its consumer.
    everything = (jet.subject(">"),)
    broker = await open_broker(require_nats(), stream=jet.stream, subjects=everything)
    try:
        with pytest.raises(OptionsError, match="dead_letter_subject: must be a subject the"):
            await broker.subscribe(f"{jet.stream}:{jet.durable}", max_in_flight=5)
        # Reading prefix.add only, prefix.add.dlq would be kept by its own stream, whose
        # duplicate window would drop the copy (it keeps the message's id).
        narrow = await open_broker(require_nats(), filter_subject=jet.subject("add"))
        try:
            with pytest.raises(OptionsError, match="dead_letter_subject: must be kept by another"):
                await narrow.subscribe(f"{jet.stream}:narrow", max_in_flight=5)
        finally:
            await narrow.close()
        # Outside what it reads and what its stream keeps, it is taken.
        elsewhere = await open_broker(require_nats(), dead_letter_subject=f"dlq-{jet.prefix}")
        try:
            source = f"{jet.stream}:{jet.durable}"
            await (await elsewhere.subscribe(source, max_in_flight=5)).close()
        finally:
            await elsewhere.close()
    finally:
        await broker.close()
