"""The attempt history of real worker processes that die mid-attempt, on PostgreSQL and SQLite.

* A worker SIGKILLed while its handler runs records nothing itself; the worker that takes the
  job over once the lease expired records the lost attempt as ``lease_expired``, naming the dead
  worker (its registry id, host and process), then its own attempt.
* A poison job that SIGKILLs every worker that runs it ends with one ``lease_expired`` record
  per killed process: two written by the takeovers, the last by the claim that dead-letters it.

Waiting here is for real processes and real lease expiry (see :mod:`tests.faults.harness`).
"""

from __future__ import annotations

import asyncio
import signal
import socket
from pathlib import Path
from uuid import UUID

import pytest

from caravel import AttemptOutcome, AttemptRecord, QueueInspector
from tests.faults.harness import (
    QUEUE,
    TENANT,
    Supervisor,
    enqueue_effects,
    job_rows,
    query,
    read_ledger,
    start_worker,
    wait_until,
)

pytestmark = pytest.mark.slow


def attempts_of(db_url: str, job_id: str) -> list[AttemptRecord]:
    async def read() -> list[AttemptRecord]:
        async with QueueInspector(db_url) as inspector:
            found = await inspector.get_attempts(job_id, QUEUE, TENANT)
        assert found is not None
        return found

    return asyncio.run(read())


def registered_id(db_url: str, pid: int) -> UUID:
    """The worker registry's id of the worker process ``pid``."""
    (row,) = query(db_url, "SELECT id FROM caravel_workers WHERE pid = ?", (pid,))
    return row[0] if isinstance(row[0], UUID) else UUID(str(row[0]))


def test_a_worker_killed_mid_attempt_leaves_a_lease_expired_record_naming_it(
    db_url: str, app_url: str, logs: Path
) -> None:
    victim = start_worker(db_url, app_url, logs / "victim.log")
    try:
        wait_until(lambda: "processing" in victim.log(), what="the worker to start")
        (job_id,) = enqueue_effects(db_url, 1, sleep=30.0, sleep_attempts=1, value=5)
        wait_until(
            lambda: any(e.event == "start" for e in read_ledger(app_url)),
            interval=0.01,
            what="the first attempt to start",
        )
        victim.signal(signal.SIGKILL)
        assert victim.wait() == -signal.SIGKILL
    finally:
        victim.kill()
    assert attempts_of(db_url, job_id) == []  # a dead worker records nothing

    survivor = start_worker(db_url, app_url, logs / "survivor.log")
    try:
        wait_until(
            lambda: job_rows(db_url)[job_id].state == "completed",
            what="the survivor to take the job over and complete it",
        )
    finally:
        assert survivor.terminate() == 0, survivor.log()

    lost, completed = attempts_of(db_url, job_id)
    assert (lost.attempt, lost.outcome, lost.category) == (
        1,
        AttemptOutcome.LEASE_EXPIRED,
        "LeaseExpired",
    )
    assert (lost.worker_id, lost.host, lost.pid) == (
        registered_id(db_url, victim.pid),
        socket.gethostname(),
        victim.pid,
    )
    assert lost.claimed_at is not None
    assert lost.finished_at is not None
    assert lost.claimed_at < lost.finished_at  # the lease's end, renewals included
    assert (completed.attempt, completed.outcome) == (2, AttemptOutcome.COMPLETED)
    assert (completed.worker_id, completed.pid) == (
        registered_id(db_url, survivor.pid),
        survivor.pid,
    )
    assert completed.lease_token == lost.lease_token + 1
    assert completed.claimed_at is not None
    assert lost.finished_at <= completed.claimed_at


def test_a_poison_job_leaves_one_lease_expired_record_per_killed_worker(
    db_url: str, app_url: str, logs: Path
) -> None:
    with Supervisor(db_url, app_url, logs, workers=2, concurrency=1) as supervisor:
        (poison,) = enqueue_effects(db_url, 1, poison=True, max_attempts=3)
        wait_until(
            lambda: job_rows(db_url)[poison].state == "dead_letter",
            timeout=60,
            what="the poison job to be dead-lettered",
        )
    records = attempts_of(db_url, poison)
    assert [(r.attempt, r.outcome) for r in records] == [
        (1, AttemptOutcome.LEASE_EXPIRED),
        (2, AttemptOutcome.LEASE_EXPIRED),
        (3, AttemptOutcome.LEASE_EXPIRED),
    ]
    killed = [e.pid for e in supervisor.crashes() if e.returncode == -signal.SIGKILL]
    assert [r.pid for r in records] == killed
    assert [r.worker_id for r in records] == [registered_id(db_url, pid) for pid in killed]
