"""What ``caravel worker`` says while it stops, as a real process on a real database with real
signals: what the first signal waits for, a second signal cancelling without a traceback, which
jobs were abandoned and when they run again, and a last ``stopped`` line that comes only once the
process really ends, synchronous handler threads included."""

from __future__ import annotations

import re
import signal
from datetime import UTC
from pathlib import Path

import pytest

from caravel import JobState, JobStatus
from tests.acceptance.test_worker_process import QUEUE, enqueue, statuses
from tests.support.apps.workload import Gate, SyncGate
from tests.support.processes import WorkerProcess, read_ledger, run_cli, wait_until

pytestmark = pytest.mark.slow

FAST = ("--poll-interval", "0.05")
ABANDONED = re.compile(
    r"caravel worker: abandoned (\d+) jobs?; (?:its|their) leases? ends? "
    r"(?:at (\d\d:\d\d:\d\d)|between (\d\d:\d\d:\d\d) and (\d\d:\d\d:\d\d)) UTC "
    r"and (?:it runs|they run) again after that"
)


class Lines:
    """The worker's standard error, read line by line as it comes."""

    def __init__(self, worker: WorkerProcess) -> None:
        assert worker.process.stderr is not None
        self._stream = worker.process.stderr
        self.seen: list[str] = []

    def until(self, prefix: str) -> str:
        def found() -> bool:
            line = self._stream.readline()
            if line:
                self.seen.append(line.rstrip("\n"))
            return bool(line) and line.startswith(prefix)

        wait_until(found, what=f"a line starting {prefix!r}")
        return self.seen[-1]


def started(evidence: Path, count: int) -> bool:
    return sum(e.kind == "start" for e in read_ledger(evidence)) >= count


@pytest.fixture
def evidence(tmp_path: Path) -> Path:
    directory = tmp_path / "evidence"
    directory.mkdir()
    return directory


def abandoned(every: list[str]) -> tuple[int, list[str]]:
    """The one ``abandoned`` line's job count and the lease end times it names."""
    (said,) = [line for line in every if line.startswith("caravel worker: abandoned")]
    match = ABANDONED.fullmatch(said)
    assert match is not None, said
    times = [match.group(2)] if match.group(2) else [match.group(3), match.group(4)]
    return int(match.group(1)), times


def lease_ends(found: list[JobStatus]) -> list[str]:
    return sorted(
        {f"{s.lease_expires_at.astimezone(UTC):%H:%M:%S}" for s in found if s.lease_expires_at}
    )


def finish(worker: WorkerProcess, lines: Lines) -> tuple[int, list[str]]:
    code, rest = worker.wait()
    every = lines.seen + rest.splitlines()
    assert not any("Traceback" in line for line in every), "\n".join(every)
    return code, every


def test_first_signal_says_what_it_waits_for_and_the_jobs_finish(
    db_url: str, evidence: Path
) -> None:
    ids = enqueue(db_url, Gate("open-a"), Gate("open-b"))
    worker = WorkerProcess(
        db_url, evidence, [QUEUE], "--concurrency", "2", "--shutdown-grace", "30", *FAST
    )
    lines = Lines(worker)
    try:
        wait_until(lambda: started(evidence, 2), what="both jobs to start")
        worker.signal(signal.SIGINT)
        said = lines.until("caravel worker: stopping")
        assert said == (
            "caravel worker: stopping: waiting up to 30 s for 2 jobs; Ctrl+C again to cancel them"
        )
        (evidence / "open-a").touch()
        (evidence / "open-b").touch()
        code, every = finish(worker, lines)
    finally:
        worker.kill()
    assert code == 0, every
    assert every[-1] == "caravel worker: stopped"
    assert not any("abandoned" in line for line in every)
    assert {s.state for s in statuses(db_url, ids)} == {JobState.COMPLETED}


def test_second_signal_cancels_and_says_when_the_jobs_run_again(
    db_url: str, evidence: Path
) -> None:
    ids = enqueue(db_url, Gate("never-a"), Gate("never-b"))
    worker = WorkerProcess(
        db_url,
        evidence,
        [QUEUE],
        "--concurrency",
        "2",
        "--shutdown-grace",
        "600",
        "--lease-duration",
        "120",
        *FAST,
    )
    lines = Lines(worker)
    try:
        wait_until(lambda: started(evidence, 2), what="both jobs to start")
        worker.signal(signal.SIGINT)
        assert "waiting up to 600 s for 2 jobs" in lines.until("caravel worker: stopping")
        worker.signal(signal.SIGINT)
        assert lines.until("caravel worker: stopping") == (
            "caravel worker: stopping: cancelling 2 jobs now"
        )
        code, every = finish(worker, lines)
    finally:
        worker.kill()
    assert code == 0, every
    assert every[-1] == "caravel worker: stopped"
    found = statuses(db_url, ids)
    assert {s.state for s in found} == {JobState.RUNNING}  # not acknowledged
    assert abandoned(every) == (2, lease_ends(found))


def test_grace_over_abandons_the_job_naming_its_lease_end(db_url: str, evidence: Path) -> None:
    (job_id,) = enqueue(db_url, Gate("never"))
    worker = WorkerProcess(
        db_url, evidence, [QUEUE], "--shutdown-grace", "0.5", "--lease-duration", "90", *FAST
    )
    lines = Lines(worker)
    try:
        wait_until(lambda: started(evidence, 1), what="the job to start")
        worker.signal(signal.SIGTERM)
        assert lines.until("caravel worker: stopping") == (
            "caravel worker: stopping: waiting up to 0.5 s for 1 job; Ctrl+C again to cancel it"
        )
        code, every = finish(worker, lines)
    finally:
        worker.kill()
    assert code == 0, every
    assert abandoned(every) == (1, lease_ends(statuses(db_url, [job_id])))
    assert every[-1] == "caravel worker: stopped"


def test_a_sync_handler_finishing_in_the_grace_is_waited_for(db_url: str, evidence: Path) -> None:
    (job_id,) = enqueue(db_url, SyncGate("open"))
    worker = WorkerProcess(db_url, evidence, [QUEUE], "--shutdown-grace", "30", *FAST)
    lines = Lines(worker)
    try:
        wait_until(lambda: started(evidence, 1), what="the job to start")
        worker.signal(signal.SIGINT)
        assert "for 1 job" in lines.until("caravel worker: stopping")
        (evidence / "open").touch()
        code, every = finish(worker, lines)
    finally:
        worker.kill()
    assert code == 0, every
    assert every[-1] == "caravel worker: stopped; every synchronous handler thread finished"
    (status,) = statuses(db_url, [job_id])
    assert status.state is JobState.COMPLETED


def test_a_sync_handler_ignoring_cancellation_does_not_keep_the_process_alive(
    db_url: str, evidence: Path
) -> None:
    (job_id,) = enqueue(db_url, SyncGate("never", heed_cancel=False))
    worker = WorkerProcess(db_url, evidence, [QUEUE], "--shutdown-grace", "60", *FAST)
    lines = Lines(worker)
    try:
        wait_until(lambda: started(evidence, 1), what="the job to start")
        worker.signal(signal.SIGINT)
        lines.until("caravel worker: stopping")
        worker.signal(signal.SIGINT)
        code, every = finish(worker, lines)  # a joined thread would hang here for ever
    finally:
        worker.kill()
    assert code == 0, every
    assert abandoned(every)[0] == 1
    assert every[-1] == (
        "caravel worker: stopped; abandoned 1 synchronous handler thread still running "
        "(the process exits without waiting for them)"
    )
    assert not any(e.kind == "end" for e in read_ledger(evidence))
    (status,) = statuses(db_url, [job_id])
    assert status.state is JobState.RUNNING


@pytest.mark.parametrize("after_ms", [0, 30, 60, 90, 120, 180, 250, 400])
def test_ctrl_c_while_the_command_is_still_starting_is_never_a_traceback(
    tmp_path: Path, after_ms: int
) -> None:
    # Wherever the interrupt lands (Python starting, the command line's modules importing,
    # the registry importing, the worker opening its database), the process ends at once with
    # exit 130, or dies of the signal itself before Python could take it, and prints no
    # traceback.
    import os
    import subprocess
    import time

    from tests.support.processes import CARAVEL, ROOT

    url = f"sqlite:///{tmp_path / 'queue.db'}"
    assert run_cli("db", "upgrade", "--url", url).returncode == 0
    process = subprocess.Popen(
        [
            CARAVEL,
            "worker",
            "--url",
            url,
            "--app",
            "tests.support.apps.workload:registry",
            "--queue",
            QUEUE,
            *FAST,
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(after_ms / 1000)  # when the signal lands, not how long anything takes
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    if _before_any_code_of_ours(err):
        return
    assert "Traceback" not in err + out, err
    assert process.returncode in (0, 130, -signal.SIGINT), (process.returncode, err)


def _before_any_code_of_ours(err: str) -> bool:
    """The interrupt landed while the interpreter was starting (its ``site`` module) or while
    the console script was importing the package's entry module, before the entry point's
    handler existed: Python's own report, never passing through ``main``."""
    if err.startswith("Fatal Python error: init_import_site"):
        return True
    frames = [line for line in err.splitlines() if line.strip().startswith("File ")]
    # Importing the entry module (the package's __init__ included) comes before its handler;
    # an interrupt inside ``main`` is ours to catch, and a traceback through it a failure.
    return bool(frames) and not any(line.rstrip().endswith(", in main") for line in frames)
