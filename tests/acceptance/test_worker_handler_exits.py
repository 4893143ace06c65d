"""``caravel worker`` as a real process when a handler calls ``exit()`` (``SystemExit``) or
raises ``KeyboardInterrupt``: the first is a failed attempt (``HandlerExited``) and the worker
runs on until SIGTERM, exiting 0; the second stops the worker as Ctrl+C does, exit 0, the job
abandoned to its lease and said so."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from caravel import JobState
from tests.acceptance.test_worker_process import QUEUE, completed, enqueue, statuses
from tests.acceptance.test_worker_shutdown import FAST, Lines, abandoned, evidence, finish
from tests.support.apps.workload import Exit, ExitInLoop, Interrupt, Nap
from tests.support.processes import WorkerProcess, wait_until

pytestmark = pytest.mark.slow

__all__ = ["evidence"]  # the fixture, shared with the shutdown tests


def test_a_handler_that_exits_fails_its_attempt_and_the_worker_runs_until_sigterm(
    db_url: str, evidence: Path
) -> None:
    exits = enqueue(db_url, Exit(1), ExitInLoop(3))
    worker = WorkerProcess(db_url, evidence, [QUEUE], "--concurrency", "2", *FAST)
    lines = Lines(worker)
    try:

        def both_failed() -> bool:
            return all(s.last_failure is not None for s in statuses(db_url, exits))

        wait_until(both_failed, what="both exiting jobs to be recorded as failed")
        assert worker.process.poll() is None  # still running
        naps = enqueue(db_url, Nap(0))
        wait_until(lambda: completed(db_url, naps), what="the next job to complete")
        assert worker.process.poll() is None
        worker.signal(signal.SIGTERM)
        code, every = finish(worker, lines)
    finally:
        worker.kill()
    assert code == 0, "\n".join(every)
    assert every[-1] == "caravel worker: stopped"
    found = statuses(db_url, exits)
    assert [(s.state, s.attempt, s.last_failure, s.error_class) for s in found] == [
        (JobState.READY, 1, "HandlerExited", "builtins.SystemExit")
    ] * 2  # each due for its retry


def test_a_handler_interrupt_stops_the_worker_as_ctrl_c_does(db_url: str, evidence: Path) -> None:
    (job_id,) = enqueue(db_url, Interrupt())
    worker = WorkerProcess(db_url, evidence, [QUEUE], *FAST)
    lines = Lines(worker)
    try:
        code, every = finish(worker, lines)  # it stops by itself
    finally:
        worker.kill()
    assert code == 0, "\n".join(every)
    assert any("worker stopping: a job handler raised KeyboardInterrupt" in x for x in every)
    assert any("job abandoned without acknowledgement" in x and "interrupted" in x for x in every)
    count, _ = abandoned(every)
    assert count == 1
    assert every[-1] == "caravel worker: stopped"
    (status,) = statuses(db_url, [job_id])
    assert (status.state, status.attempt, status.last_failure) == (JobState.RUNNING, 1, None)
