"""Both directions of the bridge against the real RabbitMQ server, in one process: egress
publishes every committed intent with confirms and its id and records it only then; ingress makes
exactly one job per message, redeliveries included, and sends every kind of bad message to the
dead letters with its category while the good ones around it go through. The queue and the
application database are SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import pytest

from caravel import DatabaseQueue, DispatchOptions, OptionsError
from caravel.bridge import (
    BrokerConsumer,
    BrokerRelay,
    Destination,
    EgressRoutes,
    IngressRoute,
    IngressRoutes,
    open_broker,
)
from caravel.bridge.failures import HEADER_FAILURE, INGRESS_FAILURES
from caravel.bridge.ports import Broker
from caravel.bridge.rabbitmq import RabbitBroker
from tests.support import Add, Report, make_registry, open_queue
from tests.support.bridge import TABLE, AppDb, queue_rows
from tests.support.rabbitmq import RABBITMQ_URL, Names, count, publish_raw, read_all

FAST = timedelta(milliseconds=200)


@asynccontextmanager
async def broker(**options: Any) -> AsyncIterator[Broker]:
    opened = await open_broker(RABBITMQ_URL, **options)
    try:
        yield opened
    finally:
        await opened.close()


# ----- egress ------------------------------------------------------------------------------


def routes_to(names: Names) -> EgressRoutes:
    return EgressRoutes(
        by_job_type={"tests.report.v1": Destination("reports.made", names.exchange)},
        default=Destination("adds.made", names.exchange),
    )


async def test_egress_publishes_every_intent_with_its_id_and_records_it_after_the_confirm(
    app_db: AppDb, names: Names
) -> None:
    await names.declare_sink()
    staged = app_db.stage(
        make_registry(),
        [(Add(i, note="n"), DispatchOptions(queue="adds", tenant_id="t1")) for i in range(25)]
        + [(Report(report_id="r"), DispatchOptions(queue="reports", tenant_id="t2"))],
    )
    async with broker() as opened:
        relay = BrokerRelay(
            app_db.url, await opened.publisher(), routes_to(names), table_name=TABLE, batch_size=10
        )
        try:
            assert [await relay.run_once() for _ in range(4)] == [10, 10, 6, 0]
        finally:
            await relay.close()
    delivered = await read_all(names.sink)
    assert sorted(m.message_id for m in delivered) == sorted(str(i) for i in staged)
    by_id = {m.message_id: m for m in delivered}
    report = by_id[str(staged[-1])]
    assert report.routing_key == "reports.made"
    assert report.json() == {"report_id": "r", "pages": []}
    assert report.headers["caravel-tenant"] == "t2"
    assert report.headers["caravel-job-type"] == "tests.report.v1"
    assert report.headers["caravel-queue"] == "reports"
    assert report.delivery_mode == 2  # persistent
    first = by_id[str(staged[0])]
    assert (first.routing_key, first.json()) == ("adds.made", {"amount": 0, "note": "n"})
    envelopes = app_db.envelopes()
    assert all(envelopes[i].dispatched_at is not None for i in staged)
    assert all(envelopes[i].queue_job_id is None for i in staged)


async def test_egress_leaves_unroutable_and_unrouted_intents_pending_and_goes_on(
    app_db: AppDb, names: Names
) -> None:
    await names.declare_sink("adds.#")  # nothing bound for reports
    routes = EgressRoutes(
        by_job_type={"tests.report.v1": Destination("reports.made", names.exchange)},
        by_queue={"adds": Destination("adds.made", names.exchange)},
    )
    staged = app_db.stage(
        make_registry(),
        [
            (Report(report_id="r"), DispatchOptions(queue="reports")),
            (Add(1), DispatchOptions(queue="elsewhere")),  # no route for this queue
            (Add(2), DispatchOptions(queue="adds")),
        ],
    )
    async with broker() as opened:
        relay = BrokerRelay(app_db.url, await opened.publisher(), routes, table_name=TABLE)
        try:
            assert await relay.run_once() == 1
            assert await relay.run_once() == 0  # the stuck ones wait for their retry time
        finally:
            await relay.close()
    (delivered,) = await read_all(names.sink)
    assert delivered.message_id == str(staged[2])
    envelopes = app_db.envelopes()
    assert envelopes[staged[0]].relay_failure == "Unroutable"
    assert envelopes[staged[1]].relay_failure == "NoRoute"
    assert envelopes[staged[0]].dispatched_at is None
    assert envelopes[staged[0]].retry_at is not None
    assert envelopes[staged[2]].dispatched_at is not None


async def test_egress_to_a_missing_exchange_without_declaring_fails_and_records_nothing(
    app_db: AppDb, names: Names
) -> None:
    from caravel.errors import BrokerError

    staged = app_db.stage(make_registry(), [(Add(1), DispatchOptions(queue="adds"))])
    async with broker(declare=False) as opened:
        relay = BrokerRelay(
            app_db.url,
            await opened.publisher(),
            EgressRoutes(default=Destination("x", names.exchange)),
            table_name=TABLE,
        )
        try:
            with pytest.raises(BrokerError) as caught:
                await relay.run_once()
        finally:
            await relay.close()
    assert caught.value.operation == "publish"
    assert "guest" not in str(caught.value)  # the URL is shown without credentials
    assert app_db.envelopes()[staged[0]].dispatched_at is None


# ----- ingress -----------------------------------------------------------------------------


@pytest.fixture
async def ingress(
    db_url: str, names: Names
) -> AsyncIterator[tuple[DatabaseQueue, RabbitBroker, Names]]:
    registry = make_registry()
    async with (
        open_queue(db_url, registry) as queue,
        broker(bindings=[(names.exchange, "#")]) as opened,
    ):
        assert isinstance(opened, RabbitBroker)
        yield queue, opened, names


def consumer_for(queue: DatabaseQueue, subscription: Any, **options: Any) -> BrokerConsumer:
    routes = IngressRoutes(
        queue.registry,
        [IngressRoute("adds.*", "tests.add.v1", "adds")],
        header_queue="by-header",
    )
    return BrokerConsumer(queue, subscription, routes, fetch_timeout=FAST, **options)


def add_message(i: int, *, message_id: str | None = None, tenant: str = "t") -> Any:
    body = json.dumps({"amount": i}).encode()
    return ("adds.made", message_id or f"m-{i}", body, {"caravel-tenant": tenant})


async def drain(consumer: BrokerConsumer) -> tuple[int, int, int]:
    created = repeated = rejected = 0
    while True:
        done = await consumer.run_once()
        if done.settled == 0:
            return created, repeated, rejected
        created, repeated, rejected = (
            created + done.created,
            repeated + done.repeated,
            rejected + done.rejected,
        )


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"], indirect=True)
async def test_ingress_makes_one_job_per_message_and_acknowledges_after_the_commit(
    ingress: tuple[DatabaseQueue, RabbitBroker, Names], db_url: str
) -> None:
    queue, opened, names = ingress
    subscription = await opened.subscribe(names.queue, max_in_flight=50)
    consumer = consumer_for(queue, subscription)
    trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    header_typed = (
        "other.key",
        "m-report",
        b'{"report_id": "r9"}',
        {"caravel-tenant": "t", "caravel-job-type": "tests.report.v1", "traceparent": trace},
    )
    await publish_raw(names.exchange, [add_message(i) for i in range(30)] + [header_typed])
    assert await drain(consumer) == (31, 0, 0)
    rows = queue_rows(db_url)
    assert len(rows) == 31
    assert {r.idempotency_key for r in rows} == {f"m-{i}" for i in range(30)} | {"m-report"}
    report = next(r for r in rows if r.job_type == "tests.report.v1")
    assert (report.queue, report.tenant_id) == ("by-header", "t")
    assert json.loads(report.trace_context) == {"traceparent": trace}
    assert {r.queue for r in rows if r.job_type == "tests.add.v1"} == {"adds"}
    await subscription.close()
    assert await count(names.queue) == 0  # every one acknowledged
    assert await count(names.dead_letters) == 0


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"], indirect=True)
async def test_the_same_message_again_never_makes_a_second_job(
    ingress: tuple[DatabaseQueue, RabbitBroker, Names], db_url: str
) -> None:
    queue, opened, names = ingress
    subscription = await opened.subscribe(names.queue, max_in_flight=50)
    consumer = consumer_for(queue, subscription)
    await publish_raw(names.exchange, [add_message(i) for i in range(5)])
    assert await drain(consumer) == (5, 0, 0)
    # A publisher retrying after a lost confirm, and the same message twice in one batch.
    await publish_raw(names.exchange, [add_message(i) for i in range(5)] + [add_message(0)])
    assert await drain(consumer) == (0, 6, 0)
    assert len(queue_rows(db_url)) == 5


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"], indirect=True)
async def test_every_bad_message_goes_to_the_dead_letters_with_its_category(
    ingress: tuple[DatabaseQueue, RabbitBroker, Names], db_url: str
) -> None:
    queue, opened, names = ingress
    subscription = await opened.subscribe(names.queue, max_in_flight=100)
    consumer = consumer_for(queue, subscription)
    too_big = json.dumps({"amount": 1, "note": "x" * (70 * 1024)}).encode()
    bad = {
        "MalformedJson": ("adds.made", "b1", b"{not json", {"caravel-tenant": "t"}),
        "UnknownJobType": ("nobody.knows", "b2", b'{"amount": 1}', {"caravel-tenant": "t"}),
        "InvalidPayload": ("adds.made", "b3", b'{"amount": "many"}', {"caravel-tenant": "t"}),
        "PayloadTooLarge": ("adds.made", "b4", too_big, {"caravel-tenant": "t"}),
        "MissingTenant": ("adds.made", "b5", b'{"amount": 1}', {}),
        "InvalidTenant": ("adds.made", "b6", b'{"amount": 1}', {"caravel-tenant": " "}),
        "InvalidMessageId": ("adds.made", "x" * 200, b'{"amount": 1}', {"caravel-tenant": "t"}),
    }
    # (aio-pika gives every message an id; MissingMessageId is a unit test's.)
    # A header naming a type that is not registered is UnknownJobType too.
    unregistered = ("z", "b7", b"{}", {"caravel-tenant": "t", "caravel-job-type": "os.system"})
    # Good messages around the bad ones: the consumer goes on.
    await publish_raw(
        names.exchange,
        [add_message(1), *bad.values(), unregistered, add_message(2)],
    )
    assert await drain(consumer) == (2, 0, len(bad) + 1)
    # The same id with another payload: a conflict.
    await publish_raw(
        names.exchange, [("adds.made", "m-1", b'{"amount": 99}', {"caravel-tenant": "t"})]
    )
    assert await drain(consumer) == (0, 0, 1)
    dead = await read_all(names.dead_letters)
    assert sorted(m.headers[HEADER_FAILURE] for m in dead) == sorted(
        [*bad, "UnknownJobType", "IdempotencyConflict"]
    )
    assert {m.headers[HEADER_FAILURE] for m in dead} <= INGRESS_FAILURES
    conflict = next(m for m in dead if m.headers[HEADER_FAILURE] == "IdempotencyConflict")
    assert (conflict.message_id, conflict.body) == ("m-1", b'{"amount": 99}')  # as it came
    assert sorted(json.loads(r.payload)["amount"] for r in queue_rows(db_url)) == [1, 2]
    assert await count(names.queue) == 0


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_backpressure_bounds_what_is_delivered_and_unsettled(
    ingress: tuple[DatabaseQueue, RabbitBroker, Names],
) -> None:
    queue, opened, names = ingress
    subscription = await opened.subscribe(names.queue, max_in_flight=4)
    await publish_raw(names.exchange, [add_message(i) for i in range(12)])
    first = await subscription.fetch(100, 5.0)
    # Given time, the broker still sends no more than the bound while these are unsettled.
    more = await subscription.fetch(100, 0.5)
    assert len(first) + len(more) == 4
    consumer = consumer_for(queue, subscription, batch_size=100)
    assert consumer.batch_size == 4  # a pass never waits for more than can be in flight
    for delivery in first + more:
        await delivery.ack()
    assert await drain(consumer) == (8, 0, 0)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_without_declaring_an_existing_queue_is_consumed_and_rejects_use_its_own_dead_letters(
    ingress: tuple[DatabaseQueue, RabbitBroker, Names],
) -> None:
    queue, declared, names = ingress
    # The topology exists already (declared by someone else): here, by a declaring broker.
    await (await declared.subscribe(names.queue, max_in_flight=1)).close()
    async with broker(declare=False) as opened:
        subscription = await opened.subscribe(names.queue, max_in_flight=10)
        consumer = consumer_for(queue, subscription)
        await publish_raw(names.exchange, [("adds.made", "b1", b"nope", {"caravel-tenant": "t"})])
        assert await drain(consumer) == (0, 0, 1)
    # basic.reject: the queue's x-dead-letter-exchange takes it, without a category header.
    (dead,) = await read_all(names.dead_letters)
    assert dead.message_id == "b1"
    assert HEADER_FAILURE not in dead.headers


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_ingress_options_are_checked(
    ingress: tuple[DatabaseQueue, RabbitBroker, Names],
) -> None:
    queue, opened, names = ingress
    subscription = await opened.subscribe(names.queue, max_in_flight=10)
    routes = IngressRoutes(queue.registry, header_queue="q")
    with pytest.raises(OptionsError, match="batch_size"):
        BrokerConsumer(queue, subscription, routes, batch_size=0)
    with pytest.raises(OptionsError, match="routes"):
        BrokerConsumer(queue, subscription, object())  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_acknowledging_some_never_acknowledges_the_unsettled_ones_before_them(
    ingress: tuple[DatabaseQueue, RabbitBroker, Names],
) -> None:
    _, opened, names = ingress
    subscription = await opened.subscribe(names.queue, max_in_flight=10)
    await publish_raw(names.exchange, [add_message(i) for i in range(6)])
    deliveries: list[Any] = []
    while len(deliveries) < 6:
        deliveries += await subscription.fetch(10, 5.0)
    # The first two in one cumulative acknowledgement; the fourth and sixth one by one, since
    # the third and fifth are still unsettled.
    await subscription.ack_many([deliveries[i] for i in (0, 1, 3, 5)])
    await subscription.close()  # the unsettled ones go back to the queue
    left = await read_all(names.queue)
    assert sorted(m.message_id or "" for m in left) == ["m-2", "m-4"]
