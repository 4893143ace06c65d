"""A handler that exits the process's way (``SystemExit`` from ``sys.exit()`` or ``exit()``) or
is interrupted (``KeyboardInterrupt``), through the real worker on every database, for async
handlers and synchronous ones (which raise in a worker thread).

``SystemExit`` is a failed attempt of its own category, ``HandlerExited``: recorded with
``error_class = builtins.SystemExit``, retried by the usual policy, and the worker carries on
(``run_once``, the continuous worker, ``drain`` on both shells). ``KeyboardInterrupt`` is a
request to stop: the job is left without an acknowledgement (it runs again when its lease
ends), the continuous worker stops as on SIGINT, and ``drain`` raises it to its caller."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

from caravel import (
    FailureCategory,
    JobContext,
    JobState,
    QueueWorker,
    SyncQueue,
    WorkerOptions,
)
from caravel.testing import drain
from tests.support import (
    LEASE,
    Add,
    Report,
    dispatch,
    open_queue,
    registry_for,
    status_of,
    within,
)


async def async_sys_exit(job: Add, ctx: JobContext[Any]) -> None:
    if job.amount == 1:
        sys.exit(3)


async def async_exit(job: Add, ctx: JobContext[Any]) -> None:
    if job.amount == 1:
        exit(1)  # the builtin a script calls


def sync_sys_exit(job: Add, ctx: JobContext[Any]) -> None:
    if job.amount == 1:
        sys.exit("a message that is never stored")


def sync_exit(job: Add, ctx: JobContext[Any]) -> None:
    if job.amount == 1:
        exit(2)


EXITS = pytest.mark.parametrize(
    "handler",
    [async_sys_exit, async_exit, sync_sys_exit, sync_exit],
    ids=["async-sys.exit", "async-exit", "sync-sys.exit", "sync-exit"],
)


async def async_interrupt(job: Add, ctx: JobContext[Any]) -> None:
    if job.amount == 1:
        raise KeyboardInterrupt


def sync_interrupt(job: Add, ctx: JobContext[Any]) -> None:
    if job.amount == 1:
        raise KeyboardInterrupt


INTERRUPTS = pytest.mark.parametrize(
    "handler", [async_interrupt, sync_interrupt], ids=["async", "sync"]
)


@EXITS
async def test_an_exiting_handler_is_a_failed_attempt_and_the_worker_carries_on(
    db_url: str, handler: Callable[..., Any]
) -> None:
    async with open_queue(db_url, registry_for(handler)) as queue:
        exits = (await queue.enqueue(Add(1), dispatch(max_attempts=2, priority=100))).job_id
        fine = (await queue.enqueue(Add(2), dispatch())).job_id
        async with QueueWorker(queue) as worker:
            assert await worker.run_once("default")
            status = await status_of(queue, exits)
            assert (status.state, status.attempt) == (JobState.READY, 1)  # due for its retry
            assert status.last_failure == FailureCategory.HANDLER_EXITED.value == "HandlerExited"
            assert status.error_class == "builtins.SystemExit"
            assert await worker.run_once("default")  # the same worker runs the next job
        assert (await status_of(queue, fine)).state is JobState.COMPLETED


@EXITS
async def test_drain_returns_after_an_exiting_handler_and_dead_letters_it(
    db_url: str, handler: Callable[..., Any]
) -> None:
    async with open_queue(db_url, registry_for(handler)) as queue:
        exits = (await queue.enqueue(Add(1), dispatch(max_attempts=2))).job_id
        await queue.enqueue(Add(2), dispatch())
        runs = await within(drain(queue, advance=True))
        assert sorted((run.outcome, run.failure or "") for run in runs) == [
            ("completed", ""),
            ("dead_letter", "HandlerExited"),
            ("retrying", "HandlerExited"),
        ]
        assert {run.error_type for run in runs if run.failure} == {"SystemExit"}
        status = await status_of(queue, exits)
        assert (status.state, status.last_failure) == (JobState.DEAD_LETTER, "HandlerExited")


def in_thread(call: Callable[[], Any]) -> Any:
    """``call()`` on a daemon thread: its result, its exception raised here, or a test failure
    when it has not returned within the safety net (a hung drain must not hang the suite)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=20)
    if thread.is_alive():
        pytest.fail("the call never returned")
    if "error" in box:
        raise box["error"]
    return box["value"]


@EXITS
def test_a_sync_queue_drain_returns_after_an_exiting_handler(
    db_url: str, handler: Callable[..., Any]
) -> None:
    with SyncQueue(db_url, registry_for(handler)) as queue:
        exits = queue.enqueue(Add(1), dispatch(max_attempts=1)).job_id
        runs = in_thread(lambda: drain(queue))
        assert [(r.outcome, r.failure, r.error_type) for r in runs] == [
            ("dead_letter", "HandlerExited", "SystemExit")
        ]
        status = queue.get_status(exits, "default", "tenant-a")
        assert status is not None
        assert status.error_class == "builtins.SystemExit"
        assert "never stored" not in repr(status)


@EXITS
async def test_the_continuous_worker_records_an_exit_and_keeps_running(
    db_url: str, handler: Callable[..., Any]
) -> None:
    done = asyncio.Event()

    async def after(job: Add, ctx: JobContext[Any]) -> None:
        done.set()

    registry = registry_for(handler, report=after)
    # One slot, the exiting job first: the next job runs only after it, in the same worker.
    options = WorkerOptions(concurrency=1)
    async with open_queue(db_url, registry) as queue, QueueWorker(queue, options=options) as w:
        exits = (await queue.enqueue(Add(1), dispatch(max_attempts=2, priority=100))).job_id
        await queue.enqueue(Report(report_id="r"), dispatch())
        task = asyncio.ensure_future(w.run("default"))
        try:
            await within(done.wait())
            assert not task.done()
        finally:
            w.stop()
            await within(task)
        status = await status_of(queue, exits)
        assert (status.state, status.attempt) == (JobState.READY, 1)
        assert (status.last_failure, status.error_class) == ("HandlerExited", "builtins.SystemExit")


@INTERRUPTS
async def test_an_interrupted_handler_stops_the_worker_and_its_job_runs_again_later(
    db_url: str, handler: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    from caravel.testing import ManualClock

    clock = ManualClock()
    async with (
        open_queue(db_url, registry_for(handler), clock=clock) as queue,
        QueueWorker(queue) as worker,
    ):
        job_id = (await queue.enqueue(Add(1), dispatch())).job_id
        with caplog.at_level(logging.WARNING, logger="caravel.worker"):
            await within(worker.run("default"))  # returns by itself: the interrupt stopped it
        assert [job.job_id for job in worker.abandoned_at_stop] == [job_id]
        status = await status_of(queue, job_id)
        assert (status.state, status.attempt, status.last_failure) == (JobState.RUNNING, 1, None)
        assert worker.abandoned_at_stop[0].lease_expires_at == status.lease_expires_at
        reasons = [getattr(r, "reason", None) for r in caplog.records]
        assert "interrupted" in reasons  # the abandoned attempt is logged, with why
        assert "worker stopping: a job handler raised KeyboardInterrupt" in caplog.text
        # Abandoned as at a shutdown: claimable again once its lease ends.
        await clock.advance(LEASE)
        claimed = await worker.leases.claim("default")
        assert claimed is not None
        assert (claimed.job_id, claimed.attempt) == (job_id, 2)


@INTERRUPTS
def test_drain_raises_an_interrupt_to_its_caller_and_leaves_the_job_to_its_lease(
    db_url: str, handler: Callable[..., Any]
) -> None:
    """Run with ``asyncio.run`` as a script would: the interrupt ends the drain and reaches the
    caller, the worker closed first."""

    async def main() -> None:
        async with open_queue(db_url, registry_for(handler)) as queue:
            job_id = (await queue.enqueue(Add(1), dispatch())).job_id
            try:
                await drain(queue)
            finally:
                status = await status_of(queue, job_id)
                assert (status.state, status.last_failure) == (JobState.RUNNING, None)

    with pytest.raises(KeyboardInterrupt):
        in_thread(lambda: asyncio.run(main()))


@INTERRUPTS
def test_a_sync_queue_drain_raises_the_interrupt_in_the_callers_thread(
    db_url: str, handler: Callable[..., Any]
) -> None:
    with SyncQueue(db_url, registry_for(handler)) as queue:
        job_id = queue.enqueue(Add(1), dispatch()).job_id
        with pytest.raises(KeyboardInterrupt):
            in_thread(lambda: drain(queue))
        status = queue.get_status(job_id, "default", "tenant-a")
        assert status is not None
        assert status.state is JobState.RUNNING
        # The queue's own loop is still serving calls.
        assert queue.enqueue(Add(2), dispatch()).job_id != job_id


@EXITS
async def test_an_immediate_queue_records_an_exit_and_returns(
    db_url: str, handler: Callable[..., Any]
) -> None:
    from caravel.testing import ImmediateQueue

    async with ImmediateQueue(registry_for(handler), target=db_url) as queue:
        job_id = (await within(queue.enqueue(Add(1), dispatch(max_attempts=1)))).job_id
        assert [(run.outcome, run.failure) for run in queue.runs] == [
            ("dead_letter", "HandlerExited")
        ]
        assert (await status_of(queue, job_id)).error_class == "builtins.SystemExit"
