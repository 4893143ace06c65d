"""SQLite under crashes: four worker processes share one queue file (and one app database file)
while a seeded schedule SIGKILLs them mid-write and a supervisor restarts them. SQLite's single
writer lock and its busy waits must never surface as a job failure, no job may be run by two
claims at once, and both files must pass ``PRAGMA integrity_check``."""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

import pytest

from tests.faults.harness import (
    Client,
    Effect,
    Supervisor,
    all_terminal,
    check,
    job_rows,
    query,
    wait_until,
)

pytestmark = pytest.mark.slow

SEED = 20240611
KILLS = 10


@pytest.mark.parametrize("backend", ["sqlite"])
def test_random_sigkills_mid_write_leave_sqlite_consistent(
    db_url: str, app_url: str, logs: Path
) -> None:
    rng = random.Random(SEED)
    client = Client(db_url, max_attempts=5)
    first = client.enqueue(
        Effect(value=i, sleep=rng.choice([0, 0, 0.01, 0.05])) for i in range(200)
    )
    with Supervisor(db_url, app_url, logs, workers=4, concurrency=2) as supervisor:
        # More jobs keep arriving through the kills, so every process is claiming, acknowledging
        # and writing effects when it dies.
        client.start(
            (Effect(value=200 + i, sleep=rng.choice([0, 0.01, 0.05])) for i in range(600)),
            pause=0.04,
            batch_size=5,
        )
        wait_until(
            lambda: sum("processing" in w.log() for w in supervisor.alive()) == 4,
            what="four workers to start",
        )
        kills = 0
        while kills < KILLS:
            time.sleep(rng.uniform(0.2, 0.7))  # the schedule: real processes, real time
            ready = [w for w in supervisor.alive() if "processing" in w.log()]
            if not ready:
                continue
            supervisor.signal(rng.choice(ready), signal.SIGKILL)
            kills += 1
        client.join(timeout=60)
        wait_until(lambda: all_terminal(db_url, 800), timeout=120, what="every job to finish")
    # Read after the supervisor stopped: the last kill may land after every job finished, before
    # the monitor's next look, and stopping still counts it as a crash.
    crashes = supervisor.crashes()
    assert client.errors == []
    assert len(client.acknowledged) == 800
    assert first == client.acknowledged[:200]

    figures = check(db_url, app_url, client.acknowledged, logs=supervisor.logs(), lease_seconds=1.0)
    # Busy or locked SQLite never became a job failure, nor stopped a worker: the only exits
    # are our kills, and no job carries a failure category.
    assert [c.returncode for c in crashes] == [-signal.SIGKILL] * KILLS
    assert {row.last_failure for row in job_rows(db_url).values()} == {None}
    assert figures.completed == 800
    assert figures.dead_letter == 0
    assert figures.reruns >= 1  # the kills did interrupt work in flight
    text = supervisor.logs()
    for symptom in ("database error", "locked", "busy", "job failed", "worker stopping"):
        assert symptom not in text
    for url in (db_url, app_url):
        assert query(url, "PRAGMA integrity_check") == [("ok",)]
    print("figures", figures.as_dict())
