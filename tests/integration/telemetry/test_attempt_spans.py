"""Each attempt's ``process`` span ends with what the attempt's record keeps, on PostgreSQL,
SQLite and ``memory://`` with the real SDK: its number, its outcome, the failure's category and
exception class, and the detail only when one was marked safe. A secret in an exception's message
reaches no span and no dead-letter hook's event. The hooks' own failures are counted."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest
from opentelemetry.trace import StatusCode

from caravel import (
    AttemptOutcome,
    DeadLetterEvent,
    Discard,
    JobContext,
    JobFailed,
    JobRegistry,
    QueueWorker,
    RetryPolicy,
    Snooze,
    WorkerOptions,
)
from tests.support import Add, SteppingClock, dispatch, open_queue, until_watching, within
from tests.support.telemetry import Telemetry, span_texts

#: Only ever in exceptions' messages: it may reach no span and no event.
SECRET = "canary-span-8a06d3c4"
SECOND = timedelta(seconds=1)
TIMEOUT = timedelta(seconds=5)

#: The span attributes that mirror an attempt record's fields.
MIRRORED = (
    "caravel.job.attempt",
    "caravel.attempt.outcome",
    "caravel.failure.category",
    "caravel.failure.error_class",
    "caravel.failure.detail",
)


class PaymentDeclined(Exception):
    """The application's error: its class is kept, never its message."""


#: The jobs that snoozed once already (a snooze gives its attempt number back).
snoozed: set[UUID] = set()
#: Set when the job that runs past its timeout started.
started: list[asyncio.Event] = []


async def handle(job: Add, ctx: JobContext[Any]) -> None:
    """What each job does, by its amount: 1 completes; 2 fails, then fails with a safe detail;
    3 discards with a safe detail; 4 snoozes, then completes; 5 runs past its timeout."""
    if job.amount == 2:
        if ctx.attempt == 1:
            raise PaymentDeclined(f"card {SECRET} declined")
        raise JobFailed(f"provider said {SECRET}", safe_detail="provider\tanswered 503")
    if job.amount == 3:
        raise Discard(safe_detail="account closed") from PaymentDeclined(SECRET)
    if job.amount == 4 and ctx.job_id not in snoozed:
        snoozed.add(ctx.job_id)
        raise Snooze(SECOND)
    if job.amount == 5:
        started[-1].set()
        await asyncio.Event().wait()


def mirrored(span: Any) -> tuple[object, ...]:
    attributes = span.attributes or {}
    return tuple(attributes.get(key) for key in MIRRORED)


async def test_every_attempt_span_carries_its_records_outcome(
    store_url: str, otel: Telemetry, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    clock = SteppingClock()
    events: list[DeadLetterEvent] = []

    async def alert(event: DeadLetterEvent) -> None:
        events.append(event)

    registry = JobRegistry()
    retry = RetryPolicy(max_attempts=2, base_delay=SECOND, max_delay=SECOND)
    registry.register("tests.add.v1", Add, handle, retry=retry)
    options = WorkerOptions(on_dead_letter=alert)
    async with (
        open_queue(store_url, registry, clock=clock) as queue,
        QueueWorker(queue, options=options) as worker,
    ):
        ids = {}
        for amount in (1, 2, 3, 4):
            ids[amount] = (await queue.enqueue(Add(amount), dispatch())).job_id
        for _ in range(2):  # every due job, then the retry and the snoozed job
            while await within(worker.step("default")) is not None:
                pass
            await clock.advance(SECOND)
        # One that runs past its timeout, its only attempt.
        started.append(asyncio.Event())
        timed = await queue.enqueue(Add(5), dispatch(timeout=TIMEOUT, max_attempts=1))
        ids[5] = timed.job_id
        task = asyncio.ensure_future(worker.step("default"))
        await within(started[-1].wait())
        await until_watching(clock, task)
        await clock.advance(TIMEOUT)
        assert await within(task) is not None
        await within(worker._hooks.idle())
        records = {
            amount: await queue.get_attempts(job_id, "default", "tenant-a")
            for amount, job_id in ids.items()
        }

    spans = sorted(otel.spans("process default"), key=lambda s: s.start_time or 0)
    for amount, job_id in ids.items():
        history = records[amount]
        assert history is not None
        mine = [s for s in spans if (s.attributes or {})["messaging.message.id"] == str(job_id)]
        expected = [
            (r.attempt, r.outcome.value, r.category, r.error_class, r.detail) for r in history
        ]
        assert [mirrored(s) for s in mine] == expected, amount
        for span, record in zip(mine, history, strict=True):
            failed = record.category is not None
            assert (span.status.status_code is StatusCode.ERROR) is failed

    # What each kind of attempt says, spelled out once.
    by_amount = {a: [r.outcome for r in records[a] or []] for a in ids}
    assert by_amount == {
        1: [AttemptOutcome.COMPLETED],
        2: [AttemptOutcome.FAILED, AttemptOutcome.FAILED],
        3: [AttemptOutcome.DISCARDED],
        4: [AttemptOutcome.SNOOZED, AttemptOutcome.COMPLETED],
        5: [AttemptOutcome.TIMED_OUT],
    }
    last_failure = (records[2] or [])[-1]
    assert (last_failure.error_class, last_failure.detail) == (
        "caravel.directives.JobFailed",
        "provider answered 503",
    )
    assert (records[2] or [])[0].error_class == f"{__name__}.PaymentDeclined"

    # The hook saw each dead letter with the fields of its last record.
    assert sorted(((e.job_id, e.outcome, e.detail) for e in events), key=str) == sorted(
        (
            (ids[2], AttemptOutcome.FAILED, "provider answered 503"),
            (ids[3], AttemptOutcome.DISCARDED, "account closed"),
            (ids[5], AttemptOutcome.TIMED_OUT, None),
        ),
        key=str,
    )

    for span in spans:
        for where, text in span_texts(span):
            assert SECRET not in text, where
    for event in events:
        assert SECRET not in repr(event)


async def test_a_hook_that_raises_is_counted_by_hook_and_reason(
    store_url: str, otel: Telemetry
) -> None:
    def alert(event: DeadLetterEvent) -> None:
        raise RuntimeError(SECRET)

    registry = JobRegistry()
    registry.register("tests.add.v1", Add, handle)
    async with (
        open_queue(store_url, registry) as queue,
        QueueWorker(queue, options=WorkerOptions(on_dead_letter=alert)) as worker,
    ):
        await queue.enqueue(Add(3), dispatch())  # discarded: a dead letter at once
        assert await worker.run_once("default")
        await within(worker._hooks.idle())
    where = {"caravel.hook": "on_dead_letter", "caravel.reason": "raised"}
    assert otel.delta("caravel.hooks.failed", where) == 1
