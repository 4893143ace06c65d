"""``JobRegistry``: registrations, their rejections, and handler detection."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import pytest
from pydantic import BaseModel

from caravel import (
    JobContext,
    JobRegistry,
    RegistrationError,
    UnknownJobTypeError,
    ValidationError,
)
from caravel.registry import JobRegistration
from tests.support import Add


@dataclasses.dataclass(frozen=True)
class SendEmail:
    to: str


@dataclasses.dataclass(frozen=True)
class SendUrgentEmail(SendEmail):
    """A subclass is a different type: it needs its own registration."""


class BuildReport(BaseModel):
    report_id: str


class PlainClass:
    def __init__(self, value: int) -> None:
        self.value = value


async def async_handler(job: Any, ctx: JobContext[Any]) -> None:
    return None


def sync_handler(job: Any, ctx: JobContext[Any]) -> None:
    return None


class AsyncCallable:
    async def __call__(self, job: Any, ctx: JobContext[Any]) -> None:
        return None


class SyncCallable:
    def __call__(self, job: Any, ctx: JobContext[Any]) -> None:
        return None


class Handlers:
    async def on_async(self, job: Any, ctx: JobContext[Any]) -> None:
        return None

    def on_sync(self, job: Any, ctx: JobContext[Any]) -> None:
        return None


# ----- registering -------------------------------------------------------------------------


def test_register_makes_the_type_findable_both_ways() -> None:
    registry = JobRegistry()
    registry.register("emails.send.v1", SendEmail, async_handler)

    entry = registry.get("emails.send.v1")
    assert isinstance(entry, JobRegistration)
    assert entry.wire_name == "emails.send.v1"
    assert entry.payload_type is SendEmail
    assert entry.handler is async_handler
    assert entry.is_async is True
    assert registry.for_job(SendEmail(to="a@example.com")) is entry
    assert "emails.send.v1" in registry
    assert len(registry) == 1
    assert list(registry) == [entry]


def test_adapter_reads_the_registered_type() -> None:
    registry = JobRegistry()
    registry.register("reports.build.v1", BuildReport, sync_handler)
    entry = registry.for_job(BuildReport(report_id="r1"))
    assert entry.adapter.validate_json('{"report_id": "r2"}') == BuildReport(report_id="r2")


def test_handles_decorator_registers_and_returns_the_handler_unchanged() -> None:
    registry = JobRegistry()

    @registry.handles("reports.build.v1", BuildReport)
    async def build(job: BuildReport, ctx: JobContext[Any]) -> None:
        return None

    assert build.__name__ == "build"
    entry = registry.get("reports.build.v1")
    assert entry is not None
    assert entry.handler is build
    assert entry.payload_type is BuildReport
    assert registry.for_job(BuildReport(report_id="r")).wire_name == "reports.build.v1"


def test_lookups_by_wire_name() -> None:
    registry = JobRegistry()
    registry.register("emails.send.v1", SendEmail, async_handler)
    registry.register("reports.build.v1", BuildReport, sync_handler)

    assert registry.get("emails.send.v1").payload_type is SendEmail  # type: ignore[union-attr]
    assert registry.get("reports.build.v1").payload_type is BuildReport  # type: ignore[union-attr]
    assert registry.get("emails.send.v2") is None
    assert registry.get("Emails.send.v1") is None  # exact match only
    fallback = registry.get("reports.build.v1")
    assert fallback is not None
    assert registry.get("missing.v1", fallback) is fallback
    assert "missing.v1" not in registry
    assert 42 not in registry
    assert [entry.wire_name for entry in registry] == ["emails.send.v1", "reports.build.v1"]
    assert len(registry) == 2


def test_registries_are_independent() -> None:
    first, second = JobRegistry(), JobRegistry()
    first.register("emails.send.v1", SendEmail, async_handler)
    second.register("emails.send.v1", SendEmail, sync_handler)  # no clash across registries
    assert "emails.send.v1" in second
    assert second.get("emails.send.v1").handler is sync_handler  # type: ignore[union-attr]


# ----- rejections --------------------------------------------------------------------------


def test_duplicate_wire_name_is_rejected_and_the_first_registration_kept() -> None:
    registry = JobRegistry()
    registry.register("emails.send.v1", SendEmail, async_handler)
    with pytest.raises(RegistrationError) as caught:
        registry.register("emails.send.v1", BuildReport, sync_handler)
    assert caught.value.field == "wire_name"
    assert registry.get("emails.send.v1").payload_type is SendEmail  # type: ignore[union-attr]
    with pytest.raises(UnknownJobTypeError):
        registry.for_job(BuildReport(report_id="r"))
    assert len(registry) == 1


def test_same_type_under_a_second_name_is_rejected_and_nothing_added() -> None:
    registry = JobRegistry()
    registry.register("emails.send.v1", SendEmail, async_handler)
    with pytest.raises(RegistrationError) as caught:
        registry.register("emails.send.v2", SendEmail, sync_handler)
    assert caught.value.field == "payload_type"
    assert "emails.send.v2" not in registry
    assert registry.for_job(SendEmail(to="x")).wire_name == "emails.send.v1"
    assert len(registry) == 1


def test_decorator_rejects_duplicates_too() -> None:
    registry = JobRegistry()
    registry.register("emails.send.v1", SendEmail, async_handler)
    with pytest.raises(RegistrationError):

        @registry.handles("emails.send.v1", BuildReport)
        def again(job: BuildReport, ctx: JobContext[Any]) -> None:
            return None


@pytest.mark.parametrize(
    "payload_type",
    [PlainClass, dict, int, str, SendEmail(to="an instance, not a type"), "emails.SendEmail"],
    ids=["plain-class", "dict", "int", "str", "dataclass-instance", "string"],
)
def test_non_dataclass_non_pydantic_types_are_rejected(payload_type: object) -> None:
    registry = JobRegistry()
    with pytest.raises(RegistrationError) as caught:
        registry.register("jobs.bad.v1", payload_type, async_handler)  # type: ignore[arg-type]
    assert caught.value.field == "payload_type"
    assert "jobs.bad.v1" not in registry


@pytest.mark.parametrize("handler", [None, "handler", 42])
def test_non_callable_handler_is_rejected(handler: object) -> None:
    registry = JobRegistry()
    with pytest.raises(RegistrationError) as caught:
        registry.register("emails.send.v1", SendEmail, handler)  # type: ignore[arg-type]
    assert caught.value.field == "handler"
    assert len(registry) == 0


@pytest.mark.parametrize(
    "wire_name",
    ["", "Emails.Send", "emails send", "emails/send", "é.v1", "x" * 129, None, 1],
    ids=["empty", "upper", "space", "slash", "non-ascii", "too-long", "none", "int"],
)
def test_invalid_wire_names_are_rejected(wire_name: object) -> None:
    registry = JobRegistry()
    with pytest.raises(ValidationError) as caught:
        registry.register(wire_name, SendEmail, async_handler)  # type: ignore[arg-type]
    assert caught.value.field == "wire_name"
    assert len(registry) == 0
    with pytest.raises(UnknownJobTypeError):
        registry.for_job(SendEmail(to="x"))


def test_invalid_wire_name_raises_registration_error() -> None:
    # JobRegistry.register documents RegistrationError "for an invalid or already used wire
    # name"; an application catching RegistrationError must see both.
    registry = JobRegistry()
    with pytest.raises(RegistrationError):
        registry.register("Not Valid", SendEmail, async_handler)


def test_longest_wire_name_is_accepted() -> None:
    registry = JobRegistry()
    registry.register("x" * 128, SendEmail, async_handler)
    assert "x" * 128 in registry


# ----- handler kinds -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("handler", "is_async"),
    [
        (async_handler, True),
        (sync_handler, False),
        (AsyncCallable(), True),
        (SyncCallable(), False),
        (Handlers().on_async, True),
        (Handlers().on_sync, False),
        (functools.partial(async_handler), True),
        (functools.partial(sync_handler), False),
        (lambda job, ctx: None, False),
    ],
    ids=[
        "async-def",
        "def",
        "async-callable-object",
        "sync-callable-object",
        "async-method",
        "sync-method",
        "partial-async",
        "partial-sync",
        "lambda",
    ],
)
def test_async_detection(handler: Any, is_async: bool) -> None:
    registry = JobRegistry()
    registry.register("jobs.detect.v1", SendEmail, handler)
    entry = registry.get("jobs.detect.v1")
    assert entry is not None
    assert entry.is_async is is_async
    assert entry.handler is handler


# ----- unknown types -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "job",
    [
        {"to": "x"},
        SendUrgentEmail(to="x"),  # subclass of a registered type: exact types only
        BuildReport(report_id="r"),
        None,
    ],
    ids=["dict", "subclass", "unregistered-model", "none"],
)
def test_for_job_on_an_unregistered_type_raises(job: object) -> None:
    registry = JobRegistry()
    registry.register("emails.send.v1", SendEmail, async_handler)
    with pytest.raises(UnknownJobTypeError) as caught:
        registry.for_job(job)
    assert caught.value.type_name == type(job).__qualname__
    assert isinstance(caught.value, TypeError)


def test_unknown_type_error_names_the_type_not_the_value() -> None:
    registry = JobRegistry()
    with pytest.raises(UnknownJobTypeError) as caught:
        registry.for_job(SendUrgentEmail(to="secret-address@example.com"))
    assert "SendUrgentEmail" in str(caught.value)
    assert "secret-address" not in str(caught.value)


class NotSerializable:
    """A field type pydantic has no schema for."""


@dataclasses.dataclass(frozen=True)
class WithOddField:
    amount: int
    odd: NotSerializable


def test_a_payload_type_with_a_field_pydantic_cannot_serialize_names_the_field() -> None:
    registry = JobRegistry()
    with pytest.raises(RegistrationError) as caught:
        registry.register("tests.odd.v1", WithOddField, _noop)
    assert caught.value.field == "payload_type"
    assert "tests.odd.v1" in caught.value.rule
    assert "'odd'" in caught.value.rule
    assert "tests.odd.v1" not in registry


@pytest.mark.parametrize(
    "handler",
    [lambda: None, lambda job: None, lambda job, ctx, extra: None],
    ids=["no-arguments", "one-argument", "three-required"],
)
def test_a_handler_that_cannot_take_job_and_context_is_refused(handler: object) -> None:
    registry = JobRegistry()
    with pytest.raises(RegistrationError) as caught:
        registry.register("tests.add.v9", Add, handler)  # type: ignore[arg-type]
    assert caught.value.field == "handler"
    assert "tests.add.v9" in caught.value.rule
    assert "handler(job, ctx)" in caught.value.rule


@pytest.mark.parametrize(
    "handler",
    [lambda job, ctx: None, lambda job, ctx, extra=1: None, lambda *args: None],
    ids=["two", "with-a-default", "varargs"],
)
def test_handlers_that_can_take_job_and_context_are_accepted(handler: object) -> None:
    registry = JobRegistry()
    registry.register("tests.add.v9", Add, handler)  # type: ignore[arg-type]
    assert "tests.add.v9" in registry


def _noop(job: object, ctx: object) -> None:
    return None


# ----- the queues a worker serves when none are named ---------------------------------------


def test_a_registry_names_no_queues_unless_told() -> None:
    assert JobRegistry().queues == ()


def test_declared_queues_come_first_then_the_schedules_queues_each_once() -> None:
    from datetime import timedelta

    from caravel import Schedule

    registry = JobRegistry(queues=["reports", "emails", "reports"])
    registry.register("tests.add.v1", Add, _noop)
    assert registry.queues == ("reports", "emails")
    registry.schedule(Schedule("tick", Add(1), queue="emails", every=timedelta(minutes=1)))
    registry.schedule(Schedule("tock", Add(2), queue="nightly", every=timedelta(hours=1)))
    assert registry.queues == ("reports", "emails", "nightly")
    assert JobRegistry(queues=("a",)).queues == ("a",)


@pytest.mark.parametrize("queues", [["Reports"], ["ok", ""], ["x" * 65], [7]])
def test_a_declared_queue_that_is_no_queue_name_is_refused(queues: list[Any]) -> None:
    with pytest.raises(RegistrationError) as caught:
        JobRegistry(queues=queues)
    assert caught.value.field == "queues"


def test_one_string_for_queues_is_refused_rather_than_read_letter_by_letter() -> None:
    with pytest.raises(RegistrationError) as caught:
        JobRegistry(queues="reports")
    assert caught.value.field == "queues"
    assert "not one name" in caught.value.rule
