"""A SQLite worker in its own process is woken by an enqueue from another process through the
wake-up sockets beside the database file, not by polling: its poll interval is 30 s, so only
the wake-up can explain a prompt start."""

from __future__ import annotations

import asyncio
import signal
import socket
import time
from pathlib import Path

import pytest

from caravel import DatabaseQueue, DispatchOptions
from tests.support.apps.workload import Nap, registry
from tests.support.databases import SqliteTemplate
from tests.support.processes import WorkerProcess, read_ledger, wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="no Unix sockets: SQLite polls"),
]

QUEUE = "naps"
POLL = "30"
#: Far below the poll interval, and far above a wake-up (milliseconds) on a loaded machine.
PROMPT = 5.0


def enqueue(url: str) -> str:
    async def go() -> str:
        async with DatabaseQueue(url, registry) as queue:
            result = await queue.enqueue(Nap(0), DispatchOptions(queue=QUEUE, tenant_id="t"))
            return str(result.job_id)

    return asyncio.run(go())


def start_of(evidence: Path, job_id: str) -> float | None:
    found = [e.at for e in read_ledger(evidence) if e.kind == "start" and e.job_id == job_id]
    return found[0] if found else None


def test_an_idle_worker_starts_a_job_enqueued_by_another_process_at_once(
    sqlite_template: SqliteTemplate, tmp_path: Path
) -> None:
    url = sqlite_template.copy_to(tmp_path / "queue.db")
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    sockets = tmp_path / "queue.db-wakeups"
    worker = WorkerProcess(url, evidence, [QUEUE], "--poll-interval", POLL)
    try:
        wait_until(lambda: sockets.is_dir() and any(sockets.iterdir()), what="a listening worker")
        # Each job after the first is enqueued once the worker has found the queue empty again
        # and gone back to waiting out its 30 s poll interval.
        for _ in range(3):
            before = time.time()
            job_id = enqueue(url)
            wait_until(lambda j=job_id: start_of(evidence, j) is not None, timeout=PROMPT * 2)
            started = start_of(evidence, job_id)
            assert started is not None
            assert started - before < PROMPT
            # Real time for the real worker to find the queue empty and go back to waiting (it
            # shows no sign of it): the next job then lands in its wait, as the test means.
            time.sleep(0.2)
    finally:
        worker.signal(signal.SIGTERM)
        code, err = worker.wait()
    assert code == 0, err
    assert list(sockets.iterdir()) == []  # the worker removed its socket on the way out
