"""Fuzzed input against real databases (PostgreSQL and SQLite), with Hypothesis.

* Enqueue arguments, from the ordinary to the hostile (payloads from empty to far over the size
  limit, deep nesting, NaN and infinities, NUL and lone surrogates, huge integers, naive and
  extreme datetimes, odd queue names, tenants and keys), are either rejected with a typed
  :class:`~caravel.errors.CaravelError` and nothing is stored, or stored and read back exactly.
* Garbage written straight into a job's payload column makes that job a dead letter
  (``InvalidPayload``, one attempt) without stopping the worker, which goes on to the next job.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from caravel import CaravelError, DatabaseQueue, DispatchOptions, ValidationError
from caravel.clock import from_ms, to_ms_ceil
from tests.faults.effects_app import Blob
from tests.faults.harness import (
    QUEUE,
    TENANT,
    Client,
    Effect,
    check,
    job_rows,
    query,
    registry,
    start_worker,
    wait_until,
)

pytestmark = pytest.mark.slow

LIMIT = 64 * 1024  # the default max_payload_bytes
HOSTILE = ["\x00", "\ud800", "\udfff", "\x1b", "\u2028", "\ufeff", "é", "𝄞", " ", ""]

# ----- strategies ----------------------------------------------------------------------------

any_text = st.text(st.characters(exclude_categories=()), max_size=40) | st.sampled_from(HOSTILE)
floats = st.floats() | st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 5e-324, 1e308])
huge_ints = st.integers() | st.sampled_from([63, 64, 100, 1000, 4299, 4300, 5000]).flatmap(
    lambda e: st.sampled_from([10**e, -(10**e), 2**e, -(2**e) - 1])
)
json_values = st.recursive(
    st.none() | st.booleans() | huge_ints | floats | any_text,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(any_text, children, max_size=4)
    ),
    max_leaves=12,
)


def nested(depth: int, leaf: Any) -> Any:
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


big_strings = st.integers(0, 200_000).map(lambda n: "x" * n) | st.integers(-64, 64).map(
    lambda d: "y" * (LIMIT - 40 + d)
)
payload_data = (
    json_values | big_strings | st.tuples(st.integers(0, 60), json_values).map(lambda t: nested(*t))
)

valid_names = st.from_regex(r"[a-z0-9._-]{1,64}", fullmatch=True)


def mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``good`` five times in six, so hostile values of one field meet sane other fields."""
    return st.integers(0, 5).flatmap(lambda n: bad if n == 0 else good)


queue_names = mostly(
    st.just(QUEUE) | valid_names, any_text | st.sampled_from(["A", "a" * 65, "q q", "ünï"])
)
identifiers = mostly(
    st.just(TENANT) | st.sampled_from(["t" * 128, "Tenant", "ténant", "a b", "𝄞"]),
    st.sampled_from(["t" * 129, "   ", "\t", ""]) | any_text,
)
offsets = st.integers(-14 * 60, 14 * 60).map(lambda m: timezone(timedelta(minutes=m)))
moments = (
    st.none()
    | st.datetimes(timezones=st.none() | offsets | st.just(UTC))
    | st.sampled_from(
        [
            datetime.min,
            datetime.max,
            datetime.min.replace(tzinfo=UTC),
            datetime.max.replace(tzinfo=UTC),
            datetime.max.replace(tzinfo=timezone(timedelta(hours=-14))),
            datetime.min.replace(tzinfo=timezone(timedelta(hours=14))),
            datetime(1970, 1, 1, tzinfo=UTC),
        ]
    )
)


def safe_repr(value: Any, limit: int = 300) -> str:
    """repr() that survives integers past Python's 4300-digit limit, shortened."""
    try:
        text = repr(value)
    except ValueError:
        text = f"<{type(value).__name__} too large to print>"
    return text if len(text) <= limit else f"{text[:limit]}...({len(text)} chars)"


def representable(moment: datetime | None) -> bool:
    """Whether the instant, stored to the millisecond, can be read back as a datetime: the
    queue must refuse the ones that cannot."""
    if moment is None or moment.tzinfo is None:
        return True
    try:
        from_ms(to_ms_ceil(moment))
    except OverflowError:
        return False
    return True


@dataclass(repr=False)
class Case:
    job: Blob
    queue: Any
    tenant: Any
    key: Any
    not_before: Any
    max_attempts: Any

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={safe_repr(getattr(self, name))}" for name in self.__dict__)
        return f"Case({fields})"


cases = st.builds(
    Case,
    job=st.builds(
        Blob,
        data=mostly(json_values, payload_data),
        text=mostly(st.text(max_size=20), any_text | big_strings),
        number=mostly(st.integers(), huge_ints),
    ),
    queue=queue_names,
    tenant=identifiers,
    key=st.none() | identifiers,
    not_before=moments,
    max_attempts=mostly(st.none() | st.integers(1, 100), st.integers(-3, 120)),
)


def _strings_and_floats(value: Any) -> Iterator[Any]:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        else:
            yield item


def must_be_rejected(case: Case) -> str | None:
    """The plain rules an accepted enqueue can never break (a partial oracle)."""
    leaves = [*_strings_and_floats(case.job.data), case.job.text]
    if any(isinstance(v, float) and not math.isfinite(v) for v in leaves):
        return "NaN or infinity"
    if any(isinstance(v, str) and re.search("[\ud800-\udfff]", v) for v in leaves):
        return "lone surrogate"
    if len(case.job.text) > LIMIT or (
        isinstance(case.job.data, str) and len(case.job.data) > LIMIT
    ):
        return "over the size limit"
    if not isinstance(case.queue, str) or not re.fullmatch(r"[a-z0-9._-]{1,64}", case.queue):
        return "bad queue name"
    if not representable(case.not_before):
        return "due time beyond the datetime range"
    if case.not_before is not None and case.not_before.tzinfo is None:
        return "naive datetime"
    if case.max_attempts is not None and not 1 <= case.max_attempts <= 100:
        return "max_attempts out of range"
    for value in (case.tenant, case.key):
        if value is not None and (
            not value.strip() or len(value) > 128 or re.search(r"[\x00-\x1f\x7f-\x9f]", value)
        ):
            return "bad tenant or key"
    return None


# ----- enqueue fuzzing -----------------------------------------------------------------------


async def _row_count(queue: DatabaseQueue) -> int:
    async with queue.store.inner.engine.connect() as conn:  # type: ignore[attr-defined]
        return int((await conn.execute(sa.text("SELECT count(*) FROM caravel_jobs"))).scalar_one())


async def _stored_key(queue: DatabaseQueue, job_id: uuid.UUID) -> Any:
    async with queue.store.inner.engine.connect() as conn:  # type: ignore[attr-defined]
        stmt = sa.text("SELECT idempotency_key, due_at FROM caravel_jobs WHERE id = :id")
        stmt = stmt.bindparams(sa.bindparam("id", type_=sa.Uuid()))
        return (await conn.execute(stmt, {"id": job_id})).one()


def test_enqueue_arguments_are_rejected_whole_or_round_trip_exactly(db_url: str) -> None:
    entry = registry.get("faults.blob.v1")
    assert entry is not None
    with asyncio.Runner() as runner:
        queue = DatabaseQueue(db_url, registry)
        seen = {"accepted": 0, "rejected": 0}

        async def attempt(case: Case) -> None:
            before = await _row_count(queue)
            now_ms = queue.clock.now_ms()
            try:
                dispatch = DispatchOptions(
                    queue=case.queue,
                    tenant_id=case.tenant,
                    idempotency_key=case.key,
                    not_before=case.not_before,
                    max_attempts=case.max_attempts,
                )
                result = await queue.enqueue(case.job, dispatch)
            except CaravelError:
                seen["rejected"] += 1
                assert await _row_count(queue) == before, "a rejected enqueue stored a row"
                return
            seen["accepted"] += 1
            reason = must_be_rejected(case)
            assert reason is None, f"accepted an enqueue with {reason}"
            stored = await queue.get_payload(result.job_id, case.queue, case.tenant)
            assert stored is not None
            assert entry.adapter.validate_json(stored) == case.job
            if result.already_enqueued:
                # A key used by an earlier example with the same content: that job, unchanged.
                assert await _row_count(queue) == before
                return
            assert await _row_count(queue) == before + 1
            # Read back through the public API: exactly what was sent.
            status = await queue.get_status(result.job_id, case.queue, case.tenant)
            assert status is not None
            assert (status.queue, status.tenant_id) == (case.queue, case.tenant)
            assert status.max_attempts == (case.max_attempts or 3)
            key, due_ms = await _stored_key(queue, result.job_id)
            assert key == case.key
            if case.not_before is None:
                assert now_ms <= due_ms <= queue.clock.now_ms()
            else:
                assert due_ms == to_ms_ceil(case.not_before)
                assert status.due_at == from_ms(due_ms)

        @settings(
            max_examples=300,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
        )
        @given(case=cases)
        def run(case: Case) -> None:
            runner.run(attempt(case))

        try:
            run()
        finally:
            runner.run(queue.close())
    # Both branches were exercised for real.
    print("enqueue fuzz", seen)
    assert seen["accepted"] >= 10
    assert seen["rejected"] >= 10


BEYOND_DATETIME = [
    datetime.max.replace(tzinfo=UTC),  # rounds up to the millisecond: year 10000
    datetime.max.replace(tzinfo=timezone(timedelta(hours=-14))),
    datetime.min.replace(tzinfo=timezone(timedelta(hours=14))),  # before year 1 in UTC
]


@pytest.mark.parametrize(
    "not_before", BEYOND_DATETIME, ids=["max-utc", "max-minus14", "min-plus14"]
)
async def test_a_due_time_beyond_the_datetime_range_is_rejected(
    db_url: str, not_before: datetime
) -> None:
    """Such an instant, stored to the millisecond, would not read back as a datetime (it once
    was accepted, and every later read of the row raised OverflowError): it is refused up
    front, naming the field, and nothing is stored."""
    async with DatabaseQueue(db_url, registry) as queue:
        with pytest.raises(ValidationError) as caught:
            DispatchOptions(queue=QUEUE, tenant_id=TENANT, not_before=not_before)
        assert caught.value.field == "not_before"
        assert "9999" in str(caught.value)
        assert await _row_count(queue) == 0


# ----- garbage in the payload column ---------------------------------------------------------

safe_chars = st.characters(exclude_categories=("Cs",), exclude_characters="\x00")
garbage = (
    st.text(safe_chars, max_size=200)
    | st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(safe_chars, max_size=8),
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(st.text(safe_chars, max_size=8), children, max_size=4)
        ),
        max_leaves=10,
    ).map(lambda v: json.dumps(v, allow_nan=True))
    | st.fixed_dictionaries(
        {
            "value": st.text(safe_chars, max_size=5)
            | st.floats()
            | st.none()
            | st.lists(st.integers())
        }
    ).map(lambda d: json.dumps(d, allow_nan=True))
    | st.integers(1, 100_000).map(lambda n: "[" * n + "]" * n)
    | st.integers(1, 10_000).map(lambda n: '{"value": ' + "9" * n + "}")
    | st.sampled_from(['{"value": 1', '{"value": 1}}', "", "null", "{}", '{"value": true}'])
)

PARKED = "parked"  # jobs wait here, unseen by the worker, until their payload is replaced


def test_garbage_payloads_dead_letter_without_stopping_the_worker(
    db_url: str, app_url: str, logs: Path
) -> None:
    entry = registry.get("faults.effect.v1")
    assert entry is not None
    worker = start_worker(db_url, app_url, logs / "worker.log")
    acknowledged: list[str] = []
    outcomes = {"invalid": 0, "valid": 0}
    try:
        wait_until(lambda: "processing" in worker.log(), what="the worker to start")
        parked = Client(db_url, queue=PARKED, max_attempts=1)
        normal = Client(db_url, max_attempts=1)

        @settings(
            max_examples=30,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
        )
        @given(text=garbage)
        def run(text: str) -> None:
            (victim,) = parked.enqueue([Effect(value=1)])
            # Garbage in, and into the worker's queue, in one statement.
            query(
                db_url,
                "UPDATE caravel_jobs SET payload = ?, queue = ? WHERE id = ?",
                (text, QUEUE, victim if "postgresql" in db_url else uuid.UUID(victim).hex),
            )
            (after,) = normal.enqueue([Effect(value=2)])
            acknowledged.extend([victim, after])
            try:
                entry.adapter.validate_json(text)
                readable = True
            except ValueError:
                readable = False

            def settled() -> bool:
                rows = job_rows(db_url)
                return all(rows[i].state in ("completed", "dead_letter") for i in (victim, after))

            wait_until(settled, timeout=30, what="both jobs to finish")
            rows = job_rows(db_url)
            got = (rows[victim].state, rows[victim].attempt, rows[victim].last_failure)
            if readable:
                outcomes["valid"] += 1
                assert got == ("completed", 1, None)
            else:
                outcomes["invalid"] += 1
                assert got == ("dead_letter", 1, "InvalidPayload")
            # The worker is still there and still working.
            assert rows[after].state == "completed"
            assert worker.poll() is None, worker.log()

        run()
    finally:
        code = worker.terminate()
    assert code == 0, worker.log()
    assert outcomes["invalid"] >= 10
    figures = check(db_url, app_url, acknowledged, logs=[worker.log()])
    assert figures.dead_by_category == {"InvalidPayload": outcomes["invalid"]}
    assert "job_type=faults.effect.v1" in worker.log()  # failures are logged by type, not text
