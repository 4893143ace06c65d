"""The broker bridges' pure logic: topic patterns, egress and ingress routes, the message an
intent becomes, what an incoming message becomes (on the in-memory queue, a real store), the
command line's route flags, and opening a broker by its URL."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from uuid import uuid4

import pytest

from caravel import DatabaseQueue, OptionsError, ValidationError
from caravel.bridge import brokers
from caravel.bridge.egress import message_for
from caravel.bridge.ingress import MessageRejected, job_for
from caravel.bridge.messages import Destination, IncomingMessage
from caravel.bridge.routing import EgressRoutes, IngressRoute, IngressRoutes, topic_matches
from caravel.cli.bridge import broker_options, egress_routes, ingress_routes
from caravel.cli.flags import FlagError
from caravel.store.outbox import PendingEnvelope
from tests.support import make_registry


@pytest.mark.parametrize(
    ("pattern", "key", "matches"),
    [
        ("orders.created", "orders.created", True),
        ("orders.created", "orders.updated", False),
        ("orders.*", "orders.created", True),
        ("orders.*", "orders.created.eu", False),
        ("orders.*", "orders", False),
        ("orders.#", "orders", True),
        ("orders.#", "orders.created.eu", True),
        ("#.eu", "orders.created.eu", True),
        ("#.eu", "orders.created.us", False),
        ("#", "anything.at.all", True),
        ("orders.>", "orders.created.eu", True),
        ("orders.>", "orders", False),
        ("*.created.*", "orders.created.eu", True),
        ("a.#.z", "a.z", True),
        ("a.#.z", "a.b.c.z", True),
        ("a.#.z", "a.b.c.y", False),
    ],
)
def test_topic_patterns(pattern: str, key: str, matches: bool) -> None:
    assert topic_matches(pattern, key) is matches


def test_egress_routes_by_type_then_queue_then_default() -> None:
    by_type, by_queue, default = Destination("t"), Destination("q", "ex"), Destination("d")
    routes = EgressRoutes(
        by_job_type={"tests.add.v1": by_type}, by_queue={"reports": by_queue}, default=default
    )
    assert routes.destination_for("reports", "tests.add.v1") is by_type
    assert routes.destination_for("reports", "tests.report.v1") is by_queue
    assert routes.destination_for("other", "tests.report.v1") is default
    assert EgressRoutes(by_queue={"a": by_queue}).destination_for("b", "x.v1") is None


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({}, "routes"),
        ({"default": Destination("")}, "default.key"),
        ({"default": Destination("has space")}, "default.key"),
        ({"default": "subject"}, "default"),
        ({"by_queue": {"Bad Queue": Destination("k")}}, "by_queue"),
        ({"by_job_type": {"": Destination("k")}}, "by_job_type"),
    ],
)
def test_egress_routes_are_checked(options: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        EgressRoutes(**options)  # type: ignore[arg-type]
    assert caught.value.field == field


def envelope(**values: object) -> PendingEnvelope:
    fields: dict[str, object] = {
        "id": uuid4(),
        "queue": "reports",
        "tenant_id": "acme",
        "idempotency_key": "k",
        "job_type": "tests.add.v1",
        "payload": '{"amount":1,"note":"é"}',
        "due_at": None,
        "max_attempts": None,
        "relay_attempts": 0,
        "trace_context": None,
    }
    fields.update(values)
    return PendingEnvelope(**fields)  # type: ignore[arg-type]


def test_an_intent_becomes_a_message_under_its_id() -> None:
    trace = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    row = envelope(trace_context=json.dumps({**trace, "baggage": "x"}))
    message = message_for(row, EgressRoutes(default=Destination("k", "ex")))
    assert message is not None
    assert message.message_id == str(row.id)
    assert message.body == '{"amount":1,"note":"é"}'.encode()  # the stored canonical JSON
    assert message.destination == Destination("k", "ex")
    assert message.content_type == "application/json"
    assert dict(message.headers) == {
        "caravel-tenant": "acme",
        "caravel-job-type": "tests.add.v1",
        "caravel-queue": "reports",
        **trace,
    }
    assert message_for(row, EgressRoutes(by_queue={"other": Destination("k")})) is None
    garbled = message_for(
        envelope(trace_context="{not json"), EgressRoutes(default=Destination("k"))
    )
    assert garbled is not None
    assert "traceparent" not in garbled.headers


def test_ingress_rules_must_name_registered_types() -> None:
    registry = make_registry()
    with pytest.raises(OptionsError, match="not registered"):
        IngressRoutes(registry, [IngressRoute("a.#", "tests.missing.v1", "q")])
    with pytest.raises(OptionsError, match="routes"):
        IngressRoutes(registry)
    with pytest.raises(ValidationError):
        IngressRoute("a.#", "tests.add.v1", "Not A Queue")


def incoming(source: str = "adds.made", **headers: str) -> IncomingMessage:
    return IncomingMessage("m-1", b"{}", headers, source)


def test_ingress_routes_rules_first_then_a_registered_header() -> None:
    registry = make_registry()
    routes = IngressRoutes(
        registry,
        [IngressRoute("adds.*", "tests.add.v1", "adds")],
        header_queue="typed",
        accept=["tests.report.v1"],
    )
    found = routes.target_for(incoming())
    assert found is not None
    assert (found.registration.wire_name, found.queue) == (
        "tests.add.v1",
        "adds",
    )
    typed = routes.target_for(incoming("x", **{"caravel-job-type": "tests.report.v1"}))
    assert typed is not None
    assert (typed.registration.wire_name, typed.queue) == (
        "tests.report.v1",
        "typed",
    )
    # A registered type the accept list leaves out, an unregistered name, no header at all.
    assert routes.target_for(incoming("x", **{"caravel-job-type": "tests.add.v1"})) is None
    assert routes.target_for(incoming("x", **{"caravel-job-type": "os.system"})) is None
    assert routes.target_for(incoming("x")) is None
    rules_only = IngressRoutes(registry, [IngressRoute("adds.*", "tests.add.v1", "adds")])
    assert rules_only.target_for(incoming("x", **{"caravel-job-type": "tests.add.v1"})) is None


@pytest.fixture
async def memory_queue() -> AsyncIterator[DatabaseQueue]:
    async with DatabaseQueue(f"memory://bridge-{uuid4().hex}", make_registry()) as queue:
        yield queue


@pytest.mark.parametrize(
    ("message_id", "body", "headers", "category"),
    [
        (None, b'{"amount": 1}', {"caravel-tenant": "t"}, "MissingMessageId"),
        ("", b'{"amount": 1}', {"caravel-tenant": "t"}, "MissingMessageId"),
        ("x" * 129, b'{"amount": 1}', {"caravel-tenant": "t"}, "InvalidMessageId"),
        ("bad\nid", b'{"amount": 1}', {"caravel-tenant": "t"}, "InvalidMessageId"),
        ("m", b'{"amount": 1}', {}, "MissingTenant"),
        ("m", b'{"amount": 1}', {"caravel-tenant": ""}, "InvalidTenant"),
        ("m", b"\xff\xfe", {"caravel-tenant": "t"}, "MalformedJson"),
        ("m", b'{"amount": 1', {"caravel-tenant": "t"}, "MalformedJson"),
        ("m", b'{"amount": "one"}', {"caravel-tenant": "t"}, "InvalidPayload"),
        ("m", b'{"amount": NaN}', {"caravel-tenant": "t"}, "InvalidPayload"),
        (
            "m",
            b'{"amount": 1, "note": "' + b"x" * 70_000 + b'"}',
            {"caravel-tenant": "t"},
            "PayloadTooLarge",
        ),
    ],
)
async def test_bad_messages_are_rejected_with_their_category(
    memory_queue: DatabaseQueue,
    message_id: str | None,
    body: bytes,
    headers: dict[str, str],
    category: str,
) -> None:
    routes = IngressRoutes(memory_queue.registry, [IngressRoute("#", "tests.add.v1", "adds")])
    message = IncomingMessage(message_id, body, headers, "adds.made")
    with pytest.raises(MessageRejected) as caught:
        job_for(message, routes, memory_queue, require_tenant=True, now=0)
    assert caught.value.category == category


async def test_a_good_message_becomes_a_job_keyed_by_its_id(memory_queue: DatabaseQueue) -> None:
    routes = IngressRoutes(memory_queue.registry, [IngressRoute("#", "tests.add.v1", "adds")])
    message = IncomingMessage("m-7", b'{"note": "n", "amount": 7}', {}, "adds.made")
    job = job_for(message, routes, memory_queue, require_tenant=False, now=5)
    assert (job.queue, job.tenant_id, job.idempotency_key, job.job_type) == (
        "adds",
        "default",
        "m-7",
        "tests.add.v1",
    )
    assert job.payload == '{"amount":7,"note":"n"}'  # canonical, as any enqueue stores it
    assert job.trace_context is None
    unknown = IncomingMessage("m-8", b"{}", {}, "adds.made")
    no_rule = IngressRoutes(memory_queue.registry, header_queue="q")
    with pytest.raises(MessageRejected) as caught:
        job_for(unknown, no_rule, memory_queue, require_tenant=False, now=5)
    assert caught.value.category == "UnknownJobType"


# ----- the command line's flags ------------------------------------------------------------


def test_egress_route_flags() -> None:
    routes = egress_routes(
        ["tests.add.v1=events/adds.made", "queue:reports=reports.subject", "*=events/other"]
    )
    assert routes.by_job_type == {"tests.add.v1": Destination("adds.made", "events")}
    assert routes.by_queue == {"reports": Destination("reports.subject")}
    assert routes.default == Destination("other", "events")
    for bad in (["nothing"], ["=x"], ["a.v1="], []):
        with pytest.raises(FlagError, match="--route"):
            egress_routes(bad)


def test_ingress_route_flags() -> None:
    registry = make_registry()
    routes = ingress_routes(
        registry,
        ["adds.#=tests.add.v1@adds", "r.*=tests.report.v1"],
        queue="q",
        type_header=False,
        accept=[],
    )
    found = routes.target_for(incoming("r.x"))
    assert found is not None
    assert found.queue == "q"
    with pytest.raises(FlagError, match="--route"):
        ingress_routes(registry, ["a.#=tests.missing.v1"], queue="q", type_header=False, accept=[])
    with pytest.raises(FlagError, match="--type-header"):
        ingress_routes(registry, [], queue="q", type_header=False, accept=[])


def test_broker_option_flags() -> None:
    assert broker_options(
        "amqp://h/", declare=False, bind=["ex:a.#"], dead_letter_exchange="dlx"
    ) == {"declare": False, "bindings": [("ex", "a.#")], "dead_letter_exchange": "dlx"}
    assert broker_options("nats://h:4222", declare=True, bind=[], dead_letter_exchange=None) == {
        "declare": True
    }
    with pytest.raises(FlagError, match="amqp"):
        broker_options("nats://h", declare=True, bind=["ex:a"], dead_letter_exchange=None)
    with pytest.raises(FlagError, match="EXCHANGE:PATTERN"):
        broker_options("amqp://h", declare=True, bind=["ex"], dead_letter_exchange=None)


# ----- opening a broker --------------------------------------------------------------------


async def test_an_unknown_scheme_names_the_known_ones() -> None:
    with pytest.raises(ValidationError, match="amqp://") as caught:
        await brokers.open_broker("kafka://h:9092")
    assert caught.value.field == "broker"


async def test_a_missing_client_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    table = {**brokers.ADAPTERS, "amqp": ("caravel.bridge.rabbitmq", "rabbitmq", "no_such_client")}
    monkeypatch.setattr(brokers, "ADAPTERS", table)
    with pytest.raises(ValidationError, match=r"caravel-queue\[rabbitmq\]"):
        await brokers.open_broker("amqp://guest:guest@h/")


def test_urls_are_shown_without_credentials() -> None:
    assert brokers.redacted("amqp://user:secret@host:5672/vhost?x=1") == "amqp://host:5672/vhost"
    assert brokers.redacted("nats://token@host") == "nats://host"
