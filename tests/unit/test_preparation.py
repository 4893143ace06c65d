"""Preparing a bulk enqueue's jobs: ``caravel.preparation.prepare_jobs`` checks and serializes
each job exactly as ``prepare_job`` does alone, and reports the first bad job's error."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel, field_serializer

from caravel import DispatchOptions, JobRegistry, UnknownJobTypeError, ValidationError
from caravel.options import QueueOptions
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


registry = JobRegistry()
registry.register("test.note.v1", Note, _noop)
registry.register("test.stamped.v1", Stamped, _noop)


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
    ],
    ids=["one dataclass type", "custom serializer", "mixed types"],
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
