"""The attempt history through the real worker on every database: each attempt ends in one
record naming the worker (its registry id, this host and process), read through
``DatabaseQueue.get_attempts``, its sync twin and the inspector, scoped as ``get_status`` is;
the worker's ``attempt_history`` bounds it; a takeover of an expired lease names the worker that
lost it. Stepped on a manual clock (``run_once``), and once through ``QueueWorker.run``."""

from __future__ import annotations

import asyncio
import os
import socket
from datetime import timedelta
from typing import Any

import pytest

from caravel import (
    AttemptOutcome,
    AttemptRecord,
    Discard,
    JobContext,
    JobFailed,
    Leases,
    OptionsError,
    QueueWorker,
    Snooze,
    SyncQueue,
    ValidationError,
    WorkerOptions,
)
from caravel.clock import from_ms
from caravel.testing import ManualClock
from tests.support import (
    LEASE,
    Add,
    dispatch,
    inspector_of,
    noop,
    open_queue,
    registry_for,
    status_of,
    within,
)

MINUTE = timedelta(minutes=1)


class PaymentDeclined(Exception):
    """An application's error: its class is recorded, never its message."""


async def test_every_attempt_of_a_job_is_recorded_with_its_worker(db_url: str) -> None:
    calls = 0

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise PaymentDeclined("card 4111-1111 declined")  # a message never kept
        if calls == 2:
            raise Snooze(timedelta(seconds=30))

    clock = ManualClock()
    async with (
        open_queue(db_url, registry_for(handle), clock=clock) as queue,
        QueueWorker(queue) as worker,
    ):
        job_id = (await queue.enqueue(Add(1), dispatch())).job_id
        started = clock.now_ms()
        assert await worker.run_once("default")  # fails: retried after the backoff
        await clock.advance(MINUTE)
        assert await worker.run_once("default")  # snoozes
        await clock.advance(MINUTE)
        assert await worker.run_once("default")  # completes

        records = await queue.get_attempts(job_id, "default", "tenant-a")
        assert records is not None
        assert [(r.attempt, r.outcome) for r in records] == [
            (1, AttemptOutcome.FAILED),
            (2, AttemptOutcome.SNOOZED),
            (2, AttemptOutcome.COMPLETED),
        ]
        failed, snoozed, completed = records
        assert (failed.category, failed.error_class, failed.detail) == (
            "HandlerFailed",
            f"{__name__}.PaymentDeclined",
            None,
        )
        assert failed.claimed_at == failed.finished_at == from_ms(started)
        assert failed.retry_at == (await status_of(queue, job_id)).created_at + timedelta(seconds=5)
        assert snoozed.retry_at == from_ms(started + 60_000 + 30_000)
        assert completed.retry_at is None
        for record in records:
            assert (record.worker_id, record.host, record.pid) == (
                worker.worker_id,
                socket.gethostname(),
                os.getpid(),
            )
            assert record.duration == timedelta(0)
        assert len({r.lease_token for r in records}) == 3
        assert "4111" not in repr(records)

        # The inspector reads the same history, scoped exactly as get_status is.
        inspector = inspector_of(queue)
        assert await inspector.get_attempts(job_id, "default", "tenant-a") == records
        assert await inspector.get_attempts(job_id, "default", "tenant-b") is None
        assert await queue.get_attempts(job_id, "other", "tenant-a") is None
        assert (await status_of(queue, job_id)).attempts_dropped == 0


async def test_a_discard_is_recorded_as_discarded(db_url: str) -> None:
    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        raise Discard("PaymentDeclined")

    async with (
        open_queue(db_url, registry_for(handle)) as queue,
        QueueWorker(queue) as worker,
    ):
        job_id = (await queue.enqueue(Add(1), dispatch())).job_id
        assert await worker.run_once("default")
        [record] = await queue.get_attempts(job_id, "default", "tenant-a") or []
        assert (record.outcome, record.category, record.error_class, record.retry_at) == (
            AttemptOutcome.DISCARDED,
            "PaymentDeclined",
            "caravel.directives.Discard",
            None,
        )


async def test_a_detail_marked_safe_is_kept_in_the_record_and_nothing_else(db_url: str) -> None:
    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        raise JobFailed("card 4111-1111 declined", safe_detail="provider answered 503\n")

    async with (
        open_queue(db_url, registry_for(handle), max_attempts=1) as queue,
        QueueWorker(queue) as worker,
    ):
        job_id = (await queue.enqueue(Add(1), dispatch())).job_id
        assert await worker.run_once("default")
        [record] = await queue.get_attempts(job_id, "default", "tenant-a") or []
        assert (record.outcome, record.detail, record.error_class) == (
            AttemptOutcome.FAILED,
            "provider answered 503",  # cleaned: the newline is gone
            "caravel.directives.JobFailed",
        )
        assert "4111" not in repr(record)


async def test_the_worker_keeps_the_records_of_its_last_attempts(db_url: str) -> None:
    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        raise PaymentDeclined("declined")

    clock = ManualClock()
    options = WorkerOptions(attempt_history=2)
    async with (
        open_queue(db_url, registry_for(handle), clock=clock, max_attempts=5) as queue,
        QueueWorker(queue, options=options) as worker,
    ):
        job_id = (await queue.enqueue(Add(1), dispatch())).job_id
        for _ in range(5):
            assert await worker.run_once("default")
            await clock.advance(timedelta(hours=1))
        records = await queue.get_attempts(job_id, "default", "tenant-a")
        assert records is not None
        assert [(r.attempt, r.retry_at is None) for r in records] == [(4, False), (5, True)]
        assert (await status_of(queue, job_id)).attempts_dropped == 3


async def test_a_takeover_records_the_lost_lease_of_the_worker_that_held_it(db_url: str) -> None:
    clock = ManualClock()
    async with (
        open_queue(db_url, registry_for(noop), clock=clock) as queue,
        QueueWorker(queue) as survivor,
    ):
        job_id = (await queue.enqueue(Add(1), dispatch())).job_id
        crashed = QueueWorker(queue)  # claims, then never records an outcome
        lost = await crashed.leases.claim("default")
        assert lost is not None
        await clock.advance(LEASE)
        assert await survivor.run_once("default")

        records = await queue.get_attempts(job_id, "default", "tenant-a")
        assert records == [
            AttemptRecord(
                attempt=1,
                lease_token=lost.lease.token,
                outcome=AttemptOutcome.LEASE_EXPIRED,
                worker_id=crashed.worker_id,
                host=None,  # it never registered: no host or process to name
                pid=None,
                claimed_at=from_ms(lost.lease.claimed_at_ms),
                finished_at=lost.lease.expires_at,
                category="LeaseExpired",
            ),
            AttemptRecord(
                attempt=2,
                lease_token=lost.lease.token + 1,
                outcome=AttemptOutcome.COMPLETED,
                worker_id=survivor.worker_id,
                host=socket.gethostname(),
                pid=os.getpid(),
                claimed_at=clock.now(),
                finished_at=clock.now(),
            ),
        ]
        await crashed.close()


async def test_a_running_worker_records_its_attempts_as_the_registered_worker(
    db_url: str,
) -> None:
    done = asyncio.Event()
    count = 3

    async def handle(job: Add, ctx: JobContext[Any]) -> None:
        nonlocal count
        count -= 1
        if not count:
            done.set()

    async with (
        open_queue(db_url, registry_for(handle)) as queue,
        QueueWorker(queue, options=WorkerOptions(concurrency=3)) as worker,
    ):
        ids = [(await queue.enqueue(Add(n), dispatch())).job_id for n in range(3)]
        task = asyncio.ensure_future(worker.run("default"))
        try:
            await within(done.wait())
        finally:
            worker.stop()
            await within(task)
        [registered] = await inspector_of(queue).list_workers()
        for job_id in ids:
            [record] = await queue.get_attempts(job_id, "default", "tenant-a") or []
            assert record.outcome is AttemptOutcome.COMPLETED
            assert (record.worker_id, record.host, record.pid) == (
                registered.worker_id,
                registered.host,
                registered.pid,
            )


def test_the_sync_queue_reads_the_history(db_url: str) -> None:
    with SyncQueue(db_url, registry_for(noop)) as queue:
        job_id = queue.enqueue(Add(1), dispatch()).job_id
        leases = Leases(queue.queue)
        claimed = queue.call(leases.claim, "default")
        assert claimed is not None
        queue.call(leases.complete, claimed.lease)
        [record] = queue.get_attempts(job_id, "default", "tenant-a") or []
        assert (record.outcome, record.worker_id, record.pid) == (
            AttemptOutcome.COMPLETED,
            None,
            os.getpid(),
        )
        assert queue.get_attempts(job_id, "default", "tenant-b") is None


@pytest.mark.parametrize("value", [0, 101, True, 2.0, None])
async def test_the_bound_is_checked_and_named(value: object) -> None:
    with pytest.raises(OptionsError) as raised:
        WorkerOptions(attempt_history=value)  # type: ignore[arg-type]
    assert raised.value.field == "attempt_history"
    async with open_queue("memory://", registry_for(noop)) as queue:
        with pytest.raises(ValidationError) as refused:
            Leases(queue, attempt_history=value)  # type: ignore[arg-type]
        assert refused.value.field == "attempt_history"
        with pytest.raises(ValidationError) as named:
            Leases(queue, worker_id="not-a-uuid")  # type: ignore[arg-type]
        assert named.value.field == "worker_id"
