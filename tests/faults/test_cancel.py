"""Cancelling jobs that real worker processes are running, on PostgreSQL and SQLite.

* A worker frozen with SIGSTOP while its handler runs; the job is cancelled; SIGCONT: whatever the
  worker does next (its handler finishes and tries to acknowledge, or it hears of the cancel
  first and cancels the handler), the job stays cancelled, and no worker ever runs it again.
* A live worker hears of the cancel and cancels the handler within a second (a notice on
  PostgreSQL, its look every poll interval on SQLite), logging it as cancelled.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest

from caravel import CancelOutcome, DatabaseQueue, JobRegistry
from tests.faults.harness import (
    QUEUE,
    TENANT,
    enqueue_effects,
    job_rows,
    read_ledger,
    start_worker,
    wait_until,
)

pytestmark = pytest.mark.slow

#: Long enough that no lease expires during a test: only the cancel ends the attempt.
LEASE = 30.0


def cancel(queue_url: str, job_id: str) -> CancelOutcome:
    async def go() -> CancelOutcome:
        async with DatabaseQueue(queue_url, JobRegistry()) as queue:
            return await queue.cancel(job_id, QUEUE, TENANT)

    return asyncio.run(go())


def started(app_url: str) -> bool:
    return any(e.event == "start" for e in read_ledger(app_url))


def test_a_stopped_worker_resumed_after_a_cancel_changes_nothing(
    db_url: str, app_url: str, logs: Path
) -> None:
    worker = start_worker(db_url, app_url, logs / "worker.log", lease_duration=LEASE)
    spare = None
    try:
        (job_id,) = enqueue_effects(db_url, 1, sleep=0.5, value=3)
        wait_until(lambda: started(app_url), interval=0.005, what="the handler to start")
        worker.signal(signal.SIGSTOP)
        assert cancel(db_url, job_id) is CancelOutcome.CANCELLED_RUNNING
        time.sleep(1.0)  # the handler's sleep ends while the process is frozen
        # A second worker is free all along: a cancelled job is never claimed again.
        spare = start_worker(db_url, app_url, logs / "spare.log", lease_duration=LEASE)
        wait_until(lambda: "processing" in spare.log(), what="the spare worker to start")

        worker.signal(signal.SIGCONT)
        wait_until(
            lambda: "acknowledgement rejected" in worker.log() or "job cancelled" in worker.log(),
            what="the resumed worker's outcome to be rejected or its handler cancelled",
        )
        time.sleep(0.5)  # room for any wrong claim to happen
    finally:
        codes = [w.terminate() for w in (worker, spare) if w is not None]
    assert codes == [0] * len(codes), worker.log()

    row = job_rows(db_url)[job_id]
    assert (row.state, row.attempt) == ("cancelled", 1)
    events = [(e.event, e.attempt, e.pid) for e in read_ledger(app_url)]
    if "acknowledgement rejected" in worker.log():
        # The handler ran to its end and wrote its effect; only its acknowledgement was fenced.
        assert events == [("start", 1, worker.pid), ("end", 1, worker.pid)]
    else:
        assert events == [("start", 1, worker.pid)]
    assert spare is not None
    assert "job_id=" + job_id not in spare.log()


def test_a_live_worker_cancels_the_handler_within_a_second(
    db_url: str, app_url: str, logs: Path
) -> None:
    worker = start_worker(db_url, app_url, logs / "worker.log", lease_duration=LEASE)
    try:
        (job_id,) = enqueue_effects(db_url, 1, sleep=20.0)
        wait_until(lambda: started(app_url), interval=0.005, what="the handler to start")
        asked = time.monotonic()
        assert cancel(db_url, job_id) is CancelOutcome.CANCELLED_RUNNING
        wait_until(
            lambda: "job cancelled" in worker.log(),
            interval=0.01,
            what="the worker to cancel the handler",
        )
        took = time.monotonic() - asked
        assert took < 1.0, took
    finally:
        code = worker.terminate()
    assert code == 0, worker.log()
    log = worker.log()
    assert "job_id=" + job_id in log
    assert "abandoned" not in log
    assert "acknowledgement rejected" not in log
    assert job_rows(db_url)[job_id].state == "cancelled"
    assert [e.event for e in read_ledger(app_url)] == ["start"]
