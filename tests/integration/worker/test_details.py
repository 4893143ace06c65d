"""Safe details through the worker, on every database and ``memory://``: what a handler marked
safe (``JobFailed``, ``Discard``) or the worker's redactor made of an exception is the failed
attempt's detail, cleaned, and a field of the worker's failure log lines; anything else leaves
no detail. (That no other text gets anywhere is ``tests/integration/telemetry/test_secrets.py``.)
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from caravel import (
    Discard,
    JobContext,
    JobFailed,
    JobState,
    Leases,
    QueueWorker,
    ValidationError,
    WorkerOptions,
)
from caravel.limits import MAX_DETAIL_LENGTH
from caravel.testing import drain
from caravel.worker.leases import Acknowledgement
from caravel.worker.outcome import Outcome
from tests.support import Add, dispatch, open_queue, registry_for, status_of

SECRET = "secret-c0ffee-9a1b"


class ProviderDown(JobFailed):
    """A kind of failure of the application's own."""


def failure_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, object]]:
    """The worker's failure log lines, each with its ``detail`` field."""
    return [
        (r.getMessage(), r.detail)  # type: ignore[attr-defined]
        for r in caplog.records
        if r.getMessage() in ("job handler failed", "job failed")
    ]


async def one_step(worker: QueueWorker) -> Outcome:
    step = await worker.step("default")
    assert step is not None
    assert step.outcome is not None
    return step.outcome


async def test_a_handler_s_safe_detail_is_kept_cleaned_and_logged(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="caravel")

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        raise ProviderDown(f"503 for {job.note}", safe_detail="provider\tanswered\n503\x00 ")

    async with (
        open_queue(store_url, registry_for(handle), max_attempts=2) as queue,
        QueueWorker(queue) as worker,
    ):
        accepted = await queue.enqueue(Add(1, note=SECRET), dispatch())
        outcome = await one_step(worker)
        status = await status_of(queue, accepted.job_id)

    assert outcome.detail == "provider answered 503"
    assert (status.state, status.last_failure) == (JobState.READY, "HandlerFailed")
    assert status.error_class == f"{__name__}.ProviderDown"
    assert failure_lines(caplog) == [
        ("job handler failed", "provider answered 503"),
        ("job failed", "provider answered 503"),
    ]
    assert SECRET not in caplog.text


async def test_a_failure_nobody_marked_safe_keeps_no_detail(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="caravel")

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        if job.amount == 1:
            raise JobFailed(f"provider answered 503 for {job.note}")
        raise RuntimeError(job.note)

    async with (
        open_queue(store_url, registry_for(handle), max_attempts=1) as queue,
        QueueWorker(queue) as worker,
    ):
        first = await queue.enqueue(Add(1, note=SECRET), dispatch())
        await queue.enqueue(Add(2, note=SECRET), dispatch())
        outcomes = [await one_step(worker), await one_step(worker)]
        status = await status_of(queue, first.job_id)

    assert [o.detail for o in outcomes] == [None, None]
    assert status.error_class == "caravel.directives.JobFailed"
    assert status.state is JobState.DEAD_LETTER
    assert [detail for _, detail in failure_lines(caplog)] == [None] * 4


async def test_a_discard_s_safe_detail_goes_with_its_category(store_url: str) -> None:
    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        raise Discard("PaymentDeclined", safe_detail="card issuer declined")

    async with (
        open_queue(store_url, registry_for(handle), max_attempts=3) as queue,
        QueueWorker(queue) as worker,
    ):
        accepted = await queue.enqueue(Add(1), dispatch())
        outcome = await one_step(worker)
        status = await status_of(queue, accepted.job_id)

    assert (outcome.category, outcome.final, outcome.detail) == (
        "PaymentDeclined",
        True,
        "card issuer declined",
    )
    assert (status.state, status.last_failure) == (JobState.DEAD_LETTER, "PaymentDeclined")


def redact(exc: BaseException) -> str | None:
    """An application's redactor: fixed texts by exception type, nothing for the rest."""
    if isinstance(exc, TimeoutError):
        return "the bank did not answer in time"
    if isinstance(exc, LookupError):
        return "x" * (MAX_DETAIL_LENGTH * 3)
    return None


async def test_the_redactor_turns_exceptions_into_details(store_url: str) -> None:
    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        if job.amount == 1:
            raise TimeoutError(job.note)
        if job.amount == 2:
            raise KeyError(job.note)
        if job.amount == 3:
            raise JobFailed(job.note, safe_detail="the handler's own")
        raise ValueError(job.note)

    async with (
        open_queue(store_url, registry_for(handle), max_attempts=1) as queue,
        QueueWorker(queue, options=WorkerOptions(redactor=redact)) as worker,
    ):
        for amount in (1, 2, 3, 4):
            await queue.enqueue(Add(amount, note=SECRET), dispatch())
        details = [(await one_step(worker)).detail for _ in range(4)]

    cut = details[1]
    assert details == ["the bank did not answer in time", cut, "the handler's own", None]
    assert cut is not None
    assert len(cut) == MAX_DETAIL_LENGTH
    assert cut.endswith("\u2026")


async def test_a_redactor_that_fails_gives_no_detail_and_the_worker_goes_on(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)

    def broken(exc: BaseException) -> str:
        raise RuntimeError(f"cannot redact {exc}")

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        if job.amount == 1:
            raise ValueError(job.note)

    async with (
        open_queue(store_url, registry_for(handle), max_attempts=1) as queue,
        QueueWorker(queue, options=WorkerOptions(redactor=broken)) as worker,
    ):
        failed = await queue.enqueue(Add(1, note=SECRET), dispatch())
        done = await queue.enqueue(Add(2), dispatch())
        assert await worker.run_once("default") is True
        assert await worker.run_once("default") is True
        assert (await status_of(queue, failed.job_id)).state is JobState.DEAD_LETTER
        assert (await status_of(queue, done.job_id)).state is JobState.COMPLETED

    (line,) = [r for r in caplog.records if r.getMessage().startswith("redactor failed")]
    assert (line.levelname, line.error_type, line.reason) == (  # type: ignore[attr-defined]
        "WARNING",
        "ValueError",
        "RuntimeError",
    )
    assert [detail for _, detail in failure_lines(caplog)] == [None, None]
    assert SECRET not in caplog.text


async def test_drain_reports_the_detail(store_url: str) -> None:
    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        raise JobFailed(safe_detail="provider answered 503")

    async with open_queue(store_url, registry_for(handle), max_attempts=1) as queue:
        await queue.enqueue(Add(1), dispatch())
        runs = await drain(queue)
    assert [(r.outcome, r.error_type, r.detail) for r in runs] == [
        ("dead_letter", "JobFailed", "provider answered 503")
    ]


# ----- through the lease protocol -----------------------------------------------------------


async def test_a_lease_holder_s_detail_is_cleaned_and_a_wrong_one_refused_by_name(
    store_url: str,
) -> None:
    async with open_queue(store_url, max_attempts=2) as queue:
        accepted = await queue.enqueue(Add(1), dispatch())
        leases = Leases(queue)
        claimed = await leases.claim("default")
        assert claimed is not None
        now = queue.clock.now_ms()
        failure = leases.failure_for(claimed.lease, "HandlerFailed", now, detail=" a\r\nb\x1b ")
        assert failure.detail == "a b"
        for wrong in (b"bytes", 503):
            with pytest.raises(ValidationError) as raised:
                await leases.fail(claimed.lease, "HandlerFailed", detail=wrong)  # type: ignore[arg-type]
            assert raised.value.field == "detail"
            with pytest.raises(ValidationError):
                await leases.record(
                    [Acknowledgement(claimed.lease, "HandlerFailed", detail=wrong)]  # type: ignore[arg-type]
                )
        status = await status_of(queue, accepted.job_id)
        assert (status.state, status.attempt, status.last_failure) == (JobState.RUNNING, 1, None)
        outcome = await leases.fail(claimed.lease, "HandlerFailed", detail="upstream\n503")
        assert not outcome.dead_lettered
