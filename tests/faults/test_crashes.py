"""Crashes and stalls of real worker processes, on PostgreSQL and SQLite.

* SIGKILL at each failpoint (``CARAVEL_FAILPOINT``), then a clean worker: the job runs again once
  its lease expires, its effect is written once, and the checker passes.
* SIGSTOP a worker past its lease; a second worker takes the job over and completes it; SIGCONT:
  the stale worker's handler finishes, its effect write finds the row and changes nothing, and
  the fence rejects its acknowledgement.
* A poison job that SIGKILLs every worker that runs it is dead-lettered as ``LeaseExpired``
  after ``max_attempts`` claims, while the other jobs keep flowing.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.faults.harness import (
    Client,
    Effect,
    Supervisor,
    check,
    enqueue_effects,
    job_rows,
    read_effects,
    read_ledger,
    start_worker,
    wait_until,
)

pytestmark = pytest.mark.slow

LEASE = 1.0


def completed(queue_url: str, job_id: str) -> bool:
    row = job_rows(queue_url).get(job_id)
    return row is not None and row.state == "completed"


@pytest.mark.parametrize("failpoint", ["after_claim", "after_handler_before_ack", "after_ack"])
def test_sigkill_at_a_failpoint_then_a_clean_worker_recovers(
    db_url: str, app_url: str, logs: Path, failpoint: str
) -> None:
    ids = enqueue_effects(db_url, 3)
    crashing = start_worker(db_url, app_url, logs / "crashing.log", failpoint=failpoint)
    try:
        code = crashing.wait(timeout=30)
    finally:
        crashing.kill()
    assert code == -signal.SIGKILL, crashing.log()

    # What the crash left behind: one job run (concurrency 1 runs one at a time), in the state
    # the failpoint implies.
    rows = job_rows(db_url)
    touched = [row for row in rows.values() if row.attempt > 0]
    if failpoint == "after_ack":
        # A finished handler's slot frees as soon as its outcome is posted, so the worker may
        # have claimed the next job while the acknowledgement was being written.
        (first_id,) = [row.id for row in touched if row.state == "completed"]
        assert len(touched) <= 2
        assert all((r.state, r.attempt) == ("running", 1) for r in touched if r.id != first_id)
    else:
        (first_id,) = [row.id for row in touched]
    others = [i for i in ids if i != first_id]
    ledger = read_ledger(app_url)
    effects = read_effects(app_url)
    if failpoint == "after_claim":
        assert (rows[first_id].state, rows[first_id].attempt) == ("running", 1)
        assert ledger == []
        assert effects == {}
    elif failpoint == "after_handler_before_ack":
        assert (rows[first_id].state, rows[first_id].attempt) == ("running", 1)
        assert [(e.event, e.attempt) for e in ledger] == [("start", 1), ("end", 1)]
        assert effects[first_id]["attempt"] == 1
    else:
        assert (rows[first_id].state, rows[first_id].attempt) == ("completed", 1)
        mine = [(e.event, e.attempt) for e in ledger if e.job_id == first_id]
        assert mine == [("start", 1), ("end", 1)]
        assert effects[first_id]["attempt"] == 1

    clean = start_worker(db_url, app_url, logs / "clean.log")
    try:
        wait_until(
            lambda: all(completed(db_url, i) for i in [first_id, *others]),
            timeout=30,
            what="the clean worker to finish every job",
        )
    finally:
        assert clean.terminate() == 0, clean.log()

    figures = check(db_url, app_url, [first_id, *others], logs=[clean.log()], lease_seconds=LEASE)
    assert figures.completed == 3
    assert figures.rejected_acks == 0
    first = [e for e in read_ledger(app_url) if e.job_id == first_id]
    effect = read_effects(app_url)[first_id]
    final = job_rows(db_url)[first_id]
    if failpoint == "after_ack":
        # Acknowledged before the crash: never runs again.
        assert final.attempt == 1
        assert [(e.event, e.attempt) for e in first] == [("start", 1), ("end", 1)]
        return
    assert final.attempt == 2
    if failpoint == "after_claim":
        # The crashed claim counts as an attempt but never ran.
        assert [(e.event, e.attempt) for e in first] == [("start", 2), ("end", 2)]
        assert effect["attempt"] == 2
    else:
        # The re-run found the effect of attempt 1 and left it alone.
        assert [(e.event, e.attempt) for e in first] == [
            ("start", 1),
            ("end", 1),
            ("start", 2),
            ("end", 2),
        ]
        assert effect["attempt"] == 1
        # Not reclaimed while the dead worker's lease was still current.
        assert first[2].at - first[0].at >= LEASE * 0.9


def test_a_worker_stopped_past_its_lease_is_fenced_off_when_it_resumes(
    db_url: str, app_url: str, logs: Path
) -> None:
    # Both workers are up before the job exists, so neither start-up delays the takeover;
    # whichever claims the job first is the one we freeze.
    workers = [start_worker(db_url, app_url, logs / f"worker-{n}.log") for n in range(2)]
    try:
        for worker in workers:
            wait_until(lambda w=worker: "processing" in w.log(), what="the workers to start")
        (job_id,) = enqueue_effects(db_url, 1, sleep=0.6, value=7)
        wait_until(
            lambda: any(e.event == "start" for e in read_ledger(app_url)),
            interval=0.005,
            what="the first attempt to start",
        )
        (start,) = read_ledger(app_url)
        stale = next(w for w in workers if w.pid == start.pid)
        other = next(w for w in workers if w is not stale)
        stale.signal(signal.SIGSTOP)
        stopped_at = start.at
        assert start.attempt == 1

        wait_until(lambda: completed(db_url, job_id), what="the takeover to complete the job")
        took_over = [e for e in read_ledger(app_url) if e.attempt == 2]
        assert [(e.event, e.pid) for e in took_over] == [("start", other.pid), ("end", other.pid)]
        assert took_over[0].at - stopped_at >= LEASE * 0.9
        before = read_effects(app_url)[job_id]

        stale.signal(signal.SIGCONT)
        # On resume the handler's sleep is due before the lease watchdog's timer, so the handler
        # normally finishes and tries to acknowledge; if the watchdog wins instead (a very slow
        # start), it cancels the handler. Either way nothing may change.
        wait_until(
            lambda: "acknowledgement rejected" in stale.log() or "abandoned" in stale.log(),
            what="the stale worker's outcome to be rejected or abandoned",
        )
    finally:
        codes = [worker.terminate() for worker in workers]
    assert codes == [0, 0], [w.log() for w in workers]
    rejected = "acknowledgement rejected" in stale.log()

    stale_events = [(e.event, e.attempt) for e in read_ledger(app_url) if e.pid == stale.pid]
    if rejected:
        # The stale handler ran to its end (attempt 1, after the takeover)...
        assert stale_events == [("start", 1), ("end", 1)]
    else:
        assert stale_events == [("start", 1)]
        assert "reason=lease_expired" in stale.log()
    # ...but changed nothing: the effect is still the one attempt 2 wrote, and the job row
    # still shows the takeover's claim as the one that completed it.
    after = read_effects(app_url)[job_id]
    assert after == before
    assert (after["attempt"], after["pid"], after["value"]) == (2, other.pid, 7)
    row = job_rows(db_url)[job_id]
    assert (row.state, row.attempt, row.last_failure) == ("completed", 2, None)

    figures = check(db_url, app_url, [job_id], logs=[w.log() for w in workers])
    assert figures.rejected_acks == (1 if rejected else 0)
    assert figures.superseded_outcomes == (1 if rejected else 0)
    assert figures.effects == 1


def test_a_poison_job_is_dead_lettered_after_max_attempts_while_others_flow(
    db_url: str, app_url: str, logs: Path
) -> None:
    # Concurrency 1: the poison job is alone in its process when it kills it (with more, the
    # jobs claimed beside it die too; see the next test).
    with Supervisor(db_url, app_url, logs, workers=2, concurrency=1) as supervisor:
        (poison,) = enqueue_effects(db_url, 1, poison=True, max_attempts=3)
        others = enqueue_effects(db_url, 40, sleep=0.02)
        wait_until(
            lambda: job_rows(db_url)[poison].state == "dead_letter",
            timeout=60,
            what="the poison job to be dead-lettered",
        )
        wait_until(
            lambda: all(completed(db_url, i) for i in others),
            timeout=60,
            what="the other jobs to complete",
        )
    row = job_rows(db_url)[poison]
    assert (row.state, row.attempt, row.last_failure) == ("dead_letter", 3, "LeaseExpired")
    starts = [(e.event, e.attempt) for e in read_ledger(app_url) if e.job_id == poison]
    assert starts == [("start", 1), ("start", 2), ("start", 3)]  # killed each time
    assert supervisor.killed() == 3
    assert supervisor.restarts == 3
    assert [e.returncode for e in supervisor.crashes()] == [-signal.SIGKILL] * 3

    figures = check(db_url, app_url, [poison, *others], logs=supervisor.logs(), lease_seconds=LEASE)
    assert figures.completed == 40
    assert figures.dead_by_category == {"LeaseExpired": 1}
    assert poison not in read_effects(app_url)


def test_jobs_claimed_beside_a_poison_job_are_not_dead_lettered_with_it(
    db_url: str, app_url: str, logs: Path
) -> None:
    """A regression test for a bug this suite found (docs/reliability.md): one worker with
    concurrency 4 (a claim takes up to half the slots) claims the poison job and an innocent job
    due at the same moment in one batch; the poison job kills the process. Both leases then
    expired at the same instant and the next claim took both again, and again, until the
    innocent job was dead-lettered too. Jobs whose lease expired are now taken over one at a
    time, so the innocent one completes."""
    poison, innocent = Client(db_url, max_attempts=3).enqueue(
        [Effect(value=0, poison=True), Effect(value=1, sleep=0.02)]
    )
    with Supervisor(db_url, app_url, logs, workers=1, concurrency=4):
        wait_until(
            lambda: job_rows(db_url)[poison].state == "dead_letter",
            timeout=60,
            what="the poison job to be dead-lettered",
        )
        wait_until(
            lambda: job_rows(db_url)[innocent].state in ("completed", "dead_letter"),
            timeout=30,
            what="the innocent job to finish",
        )
    rows = job_rows(db_url)
    assert rows[poison].last_failure == "LeaseExpired"
    assert (rows[innocent].state, rows[innocent].last_failure) == ("completed", None)
