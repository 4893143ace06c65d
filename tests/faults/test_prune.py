"""Pruning while real worker processes drain, on PostgreSQL and SQLite.

Old finished jobs (half of them keyed) sit beside a backlog that two ``caravel worker``
processes drain, while ``caravel jobs prune`` runs as a real command line over and over, small
batches each its own transaction, and one pruner is killed with SIGKILL in the middle of its
work. Afterwards:

* every job of the backlog ran exactly once and completed: a prune never touches a live job;
* every old job is gone (keyless) or a tombstone (keyed), and no half-pruned row is left by the
  killed pruner;
* a repeated submission under an old key still returns the original job, and a different
  payload under it still conflicts: the duplicate protection outlived the rows.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from caravel.errors import IdempotencyConflictError
from tests.faults.effects_app import Effect
from tests.faults.harness import (
    CARAVEL,
    QUEUE,
    ROOT,
    Client,
    job_rows,
    query,
    read_ledger,
    start_worker,
    wait_until,
)

pytestmark = pytest.mark.slow

OLD = 300
BACKLOG = 400
DAY_MS = 86_400_000


def _age_finished_jobs(url: str) -> None:
    """Move the finish of every job finished so far (the seeded ones) eight days into the past:
    the CLI's ages count from the real clock, and these must be old for a 7-day retention."""
    query(
        url,
        f"UPDATE caravel_jobs SET finished_at = finished_at - {8 * DAY_MS}, "
        f"updated_at = updated_at - {8 * DAY_MS} WHERE state = 'completed'",
    )


def _pruner(url: str, log: Path) -> subprocess.Popen[bytes]:
    args = [CARAVEL, "jobs", "prune", "--url", url, "--completed", "7d", "--limit", "5", "--yes"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    with open(log, "ab") as out:
        return subprocess.Popen(args, cwd=ROOT, env=env, stdout=out, stderr=out)


def test_pruning_while_workers_drain_loses_nothing_and_keeps_the_keys(
    db_url: str, app_url: str, logs: Path
) -> None:
    client = Client(db_url)
    keys = [f"old-{n}" if n % 2 else None for n in range(OLD)]
    old = client.enqueue((Effect(value=n) for n in range(OLD)), keys=keys)
    drainer = start_worker(db_url, app_url, logs / "seed.log", concurrency=8)
    try:
        wait_until(lambda: _completed(db_url) == OLD, timeout=120, what="the old jobs to finish")
    finally:
        assert drainer.terminate() == 0, drainer.log()
    _age_finished_jobs(db_url)
    seeded_events = len(read_ledger(app_url))

    backlog = client.enqueue(Effect(value=OLD + n, sleep=0.002) for n in range(BACKLOG))
    workers = [
        start_worker(db_url, app_url, logs / f"worker-{n}.log", concurrency=4) for n in range(2)
    ]
    pruner_log = logs / "pruner.log"
    try:
        victim = _pruner(db_url, pruner_log)
        wait_until(lambda: _tombstones(db_url) > 0, timeout=60, what="the first pruned batch")
        victim.send_signal(signal.SIGKILL)
        victim.wait(30)
        runs = 0
        while _old_left(db_url, old):  # one whole run after the kill prunes the rest
            runs += 1
            assert runs < 20, pruner_log.read_text()
            pruner = _pruner(db_url, pruner_log)
            code = pruner.wait(120)
            # Exit 1 only if the killed pruner's lock was still held for a moment.
            assert code == 0 or "another pruner" in pruner_log.read_text(), pruner_log.read_text()
        wait_until(
            lambda: all(job_rows(db_url)[j].state == "completed" for j in backlog),
            timeout=180,
            what="the backlog to drain",
        )
    finally:
        codes = [w.terminate() for w in workers]
    assert codes == [0, 0], "\n".join(w.log() for w in workers)

    rows = job_rows(db_url)
    assert Counter(rows[job_id].state for job_id in backlog) == {"completed": BACKLOG}
    runs_of = Counter(e.job_id for e in read_ledger(app_url)[seeded_events:] if e.event == "end")
    assert all(runs_of[job_id] == 1 for job_id in backlog), "a live job ran twice or never"
    for job_id, key in zip(old, keys, strict=True):
        if key is None:
            assert job_id not in rows  # keyless: deleted
        else:
            assert rows[job_id].state == "pruned"  # keyed: a tombstone, nothing in between

    keyed = [(job_id, key) for job_id, key in zip(old, keys, strict=True) if key is not None]
    job_id, key = keyed[0]
    value = old.index(job_id)
    assert client.enqueue([Effect(value=value)], keys=[key]) == [job_id]
    with pytest.raises(IdempotencyConflictError):
        client.enqueue([Effect(value=value + 1_000_000)], keys=[key])


def _completed(url: str) -> int:
    return sum(row.state == "completed" for row in job_rows(url, QUEUE).values())


def _tombstones(url: str) -> int:
    return sum(row.state == "pruned" for row in job_rows(url, QUEUE).values())


def _old_left(url: str, old: list[str]) -> int:
    rows = job_rows(url, QUEUE)
    return sum(rows[job_id].state == "completed" for job_id in old if job_id in rows)
