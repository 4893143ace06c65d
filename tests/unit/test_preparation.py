"""Preparing a bulk enqueue's jobs: ``caravel.preparation.prepare_jobs`` checks and serializes
each job exactly as ``prepare_job`` does alone, and reports the first bad job's error."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel, field_serializer

from caravel import DispatchOptions, JobRegistry, UnknownJobTypeError, ValidationError
from caravel.limits import MAX_JSON_DEPTH
from caravel.options import QueueOptions, RetryPolicy
from caravel.preparation import prepare_job, prepare_jobs

NOW = 1_700_000_000_123
OPTIONS = QueueOptions(max_payload_bytes=200)


@dataclasses.dataclass(frozen=True)
class Note:
    text: str
    value: Any = None


class Stamped(BaseModel):
    at: datetime

    @field_serializer("at")
    def _day(self, at: datetime) -> str:
        return at.date().isoformat()


@dataclasses.dataclass(frozen=True)
class Unregistered:
    n: int


async def _noop(job: object, ctx: object) -> None:
    return None


@dataclasses.dataclass(frozen=True)
class Order:
    customer: int


registry = JobRegistry()
registry.register("test.note.v1", Note, _noop)
registry.register("test.stamped.v1", Stamped, _noop)
registry.register(
    "test.order.v1",
    Order,
    _noop,
    retry=RetryPolicy(max_attempts=7),
    priority=5,
    partition_by="customer",
    weight=3,
)


def _nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


def _dispatch(key: str, **kwargs: Any) -> DispatchOptions:
    return DispatchOptions(queue="q", tenant_id="t", idempotency_key=key, **kwargs)


def _alone(items: list[tuple[object, Any]]) -> list[tuple[Any, ...]]:
    """Each job prepared by itself, without its id (ids are random)."""
    return [prepare_job(registry, OPTIONS, job, d, NOW)[1:] for job, d in items]


def _error(items: list[tuple[object, Any]]) -> BaseException:
    with pytest.raises((ValidationError, UnknownJobTypeError)) as caught:
        prepare_jobs(registry, OPTIONS, items, NOW)
    return caught.value


@pytest.mark.parametrize(
    "items",
    [
        [(Note(f"n{i}", {"b": i, "a": [i, 1.5]}), _dispatch(f"k{i}")) for i in range(5)],
        [
            (Stamped(at=datetime(2026, 1, i + 1, 12, tzinfo=UTC)), _dispatch(f"k{i}"))
            for i in range(3)
        ],
        [
            (Note("mixed"), _dispatch("a", max_attempts=3)),
            (Stamped(at=datetime(2026, 5, 1, tzinfo=UTC)), _dispatch("b")),
            (Note("late"), _dispatch("c", not_before=datetime(2030, 1, 1, tzinfo=UTC))),
        ],
        [
            (Note("café"), _dispatch("a")),
            (Note("deep", _nested(MAX_JSON_DEPTH - 1)), _dispatch("b")),
            (Note("plain"), _dispatch("c")),
        ],
        [(Order(i), _dispatch(f"k{i}", partition_key="p" if i else None)) for i in range(3)],
    ],
    ids=["one dataclass type", "custom serializer", "mixed types", "one by one", "type options"],
)
def test_the_batch_is_prepared_as_each_job_alone(items: list[tuple[object, Any]]) -> None:
    prepared = prepare_jobs(registry, OPTIONS, items, NOW)

    assert [job[1:] for job in prepared] == _alone(items)
    ids = [job.id for job in prepared]
    assert len(set(ids)) == len(ids)
    assert all(i.version == 7 and i.int >> 80 == NOW for i in ids)


def test_the_first_bad_payload_is_the_error_and_names_its_rule() -> None:
    items = [(Note("ok"), _dispatch("a")), (Note("x" * 300), _dispatch("b"))]
    items.append((Note("nan", float("nan")), _dispatch("c")))

    error = _error(items)

    assert isinstance(error, ValidationError)
    assert (error.field, error.rule) == ("payload", "must be at most 200 bytes of UTF-8 JSON")


def test_an_earlier_bad_dispatch_wins_over_a_later_bad_payload() -> None:
    items: list[tuple[object, Any]] = [(Note("ok"), _dispatch("a")), (Note("ok"), "queue=q")]
    items.append((Note("nan", float("nan")), _dispatch("c")))

    error = _error(items)

    assert isinstance(error, ValidationError)
    assert error.field == "dispatch"


def test_undecodable_bytes_are_named_by_field_within_a_batch() -> None:
    items = [(Note("ok"), _dispatch("a")), (Note("bad", b"\xff"), _dispatch("b"))]

    error = _error(items)

    assert isinstance(error, ValidationError)
    assert error.field == "payload.value"


def test_an_unregistered_job_in_a_batch_is_refused() -> None:
    items = [(Note("ok"), _dispatch("a")), (Unregistered(1), _dispatch("b"))]

    assert isinstance(_error(items), UnknownJobTypeError)


def test_an_empty_batch_prepares_nothing() -> None:
    assert prepare_jobs(registry, OPTIONS, [], NOW) == []


def test_each_field_of_a_new_job_comes_from_its_dispatch_and_its_type() -> None:
    given = DispatchOptions(
        queue="q",
        tenant_id="t",
        delay=timedelta(seconds=2),
        max_attempts=4,
        tags=("b", "a"),
        priority=-3,
        pending_key="p",
        on_pending="replace",
        max_debounce=timedelta(seconds=9),
        timeout=timedelta(milliseconds=1500),
        partition_key="part",
    )
    defaults = DispatchOptions(queue="q", tenant_id="t", idempotency_key="k")

    (full, typed) = prepare_jobs(
        registry, OPTIONS, [(Note("a"), given), (Order(42), defaults)], NOW
    )

    assert full._asdict() == {
        "id": full.id,
        "queue": "q",
        "job_type": "test.note.v1",
        "tenant_id": "t",
        "idempotency_key": None,
        "payload": '{"text":"a","value":null}',
        "max_attempts": 4,
        "due_at": NOW + 2000,
        "created_at": NOW,
        "trace_context": None,
        "tags": ",b,a,",
        "priority": -3,
        "pending_key": "p",
        "debounce_ms": 9000,
        "timeout_ms": 1500,
        "partition_key": "part",
        "weight": None,
    }
    assert typed[2:] == prepare_job(registry, OPTIONS, Order(42), defaults, NOW)[2:]
    assert (typed.max_attempts, typed.priority, typed.partition_key, typed.weight) == (
        7,
        5,
        "42",
        3,
    )
    assert typed.idempotency_key == "k"
