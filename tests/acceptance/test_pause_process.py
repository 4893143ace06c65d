"""Pausing across processes: ``caravel queues pause`` in one process stops a running ``caravel
worker`` in another from claiming the queue (the worker says so in its log), jobs enqueued
meanwhile wait while the worker's other queue carries on, and ``caravel queues resume`` lets
them run. On every database: PostgreSQL tells the worker through a notification, SQLite by the
worker's poll of the paused set (``--poll-interval``)."""

from __future__ import annotations

import asyncio
import queue
import threading
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from caravel import DatabaseQueue, DispatchOptions, JobState, QueueInspector
from tests.support.apps.workload import Nap, registry
from tests.support.processes import WorkerProcess, run_cli, wait_until

pytestmark = pytest.mark.slow  # real worker processes


class StderrLines:
    """The worker's standard error, line by line, read on a thread as it is written."""

    def __init__(self, worker: WorkerProcess) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        stream: Any = worker.process.stderr
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: Any) -> None:
        for line in stream:
            self.lines.put(line)

    def wait_for(self, text: str, timeout: float = 30.0) -> str:
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no {text!r} in the worker's log: {self.seen}") from None
            self.seen.append(line)
            if text in line:
                return line


async def _enqueue(url: str, name: str) -> UUID:
    async with DatabaseQueue(url, registry) as q:
        return (await q.enqueue(Nap(0.0), DispatchOptions(queue=name))).job_id


async def _state(url: str, job_id: UUID, name: str) -> JobState:
    async with QueueInspector(url) as reader:
        status = await reader.get_status(job_id, name)
    assert status is not None
    return status.state


def _completed(url: str, job_id: UUID, name: str) -> bool:
    return asyncio.run(_state(url, job_id, name)) is JobState.COMPLETED


def test_a_pause_from_the_command_line_reaches_a_running_worker(
    db_url: str, tmp_path: Path
) -> None:
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    worker = WorkerProcess(db_url, evidence, ["a", "b"], "--poll-interval", "0.2")
    try:
        log = StderrLines(worker)
        first = asyncio.run(_enqueue(db_url, "a"))
        wait_until(lambda: _completed(db_url, first, "a"), what="the worker to run a job of a")

        assert run_cli("queues", "pause", "a", "--url", db_url).returncode == 0
        line = log.wait_for("queue paused")
        assert "queue=a" in line
        waiting = asyncio.run(_enqueue(db_url, "a"))  # accepted while paused
        other = asyncio.run(_enqueue(db_url, "b"))
        wait_until(lambda: _completed(db_url, other, "b"), what="queue b to carry on")
        assert asyncio.run(_state(db_url, waiting, "a")) is JobState.READY

        assert run_cli("queues", "resume", "a", "--url", db_url).returncode == 0
        log.wait_for("queue resumed")
        wait_until(lambda: _completed(db_url, waiting, "a"), what="the waiting job to run")
    finally:
        worker.kill()
