"""Concurrency limits under crashes: three worker processes (eighteen handler slots) share a
queue limited to 10 running jobs and 2 per partition key, while a seeded schedule SIGKILLs
workers (a supervisor restarts them) and SIGSTOPs others past their leases. The handlers' own
start and end records (:mod:`tests.faults.limits_app`) must show the limits never exceeded,
counting a run whose lease expired as finished only from that moment, and every job must
complete. On SQLite the processes share one file on one host; on PostgreSQL one database."""

from __future__ import annotations

import asyncio
import random
import signal
import threading
import time
from pathlib import Path

import pytest

from caravel import DatabaseQueue, DispatchOptions, QueueOptions
from tests.faults.harness import Supervisor, all_terminal, job_states, wait_until
from tests.faults.limits_app import (
    CONCURRENCY,
    PER_KEY,
    QUEUE,
    QUEUE_URL_ENV,
    RECORDS_ENV,
    Slot,
    check_records,
    registry,
)

pytestmark = pytest.mark.slow

SEED = 20261203
JOBS = 400
KEYS = 8
LEASE = 1.5
MIN_KILLS = 6
MIN_STOPS = 4


async def _enqueue(url: str, rng: random.Random) -> None:
    options = QueueOptions(max_attempts=50)
    async with DatabaseQueue(url, registry, options=options) as queue:
        await queue.enqueue_many(
            [
                (
                    Slot(key=f"k{rng.randrange(KEYS)}", n=n, sleep=rng.uniform(0.05, 0.25)),
                    DispatchOptions(queue=QUEUE, tenant_id=f"tenant-{n % 3}"),
                )
                for n in range(JOBS)
            ]
        )


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_limits_hold_while_workers_are_killed_and_stopped(
    db_url: str, app_url: str, logs: Path, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    records = tmp_path / "records"
    records.mkdir()
    asyncio.run(_enqueue(db_url, rng))
    env = {RECORDS_ENV: str(records), QUEUE_URL_ENV: db_url}
    kills = stops = 0
    continued: list[threading.Timer] = []
    with Supervisor(
        db_url,
        app_url,
        logs,
        workers=3,
        concurrency=6,
        lease_duration=LEASE,
        queues=(QUEUE,),
        app="tests.faults.limits_app:registry",
        env=env,
    ) as supervisor:
        wait_until(
            lambda: sum("processing" in w.log() for w in supervisor.alive()) == 3,
            what="three workers to start",
        )
        while not all_terminal(db_url, JOBS) or kills < MIN_KILLS or stops < MIN_STOPS:
            time.sleep(rng.uniform(0.3, 0.8))
            ready = [w for w in supervisor.running() if "processing" in w.log()]
            if len(ready) < 2:  # keep one worker working
                continue
            victim = rng.choice(ready)
            if rng.random() < 0.5:
                supervisor.signal(victim, signal.SIGKILL)
                kills += 1
            else:
                # Stopped past its lease: its runs stop counting when their leases expire,
                # and it carries on (its writes fenced off) when it is continued.
                supervisor.signal(victim, signal.SIGSTOP)
                stops += 1
                timer = threading.Timer(
                    rng.uniform(LEASE + 0.5, LEASE + 2.0),
                    supervisor.signal,
                    (victim, signal.SIGCONT),
                )
                timer.start()
                continued.append(timer)
            if kills + stops > 200:
                raise AssertionError("the jobs never finished under the faults")
        for timer in continued:
            timer.join()
        wait_until(lambda: all_terminal(db_url, JOBS), timeout=120, what="every job to finish")

    states = job_states(db_url, QUEUE)
    figures = check_records(records)
    print(
        "limits-figures",
        {
            "backend": db_url.split(":")[0],
            "jobs": JOBS,
            "kills": kills,
            "stops": stops,
            "handler_runs": figures.runs,
            "runs_cut_short": figures.unfinished,
            "max_running": figures.max_running,
            "max_per_key": figures.max_per_key,
            "limits": {"concurrency": CONCURRENCY, "per_key": PER_KEY},
        },
    )
    assert states == {"completed": JOBS}  # no job lost, none dead-lettered
    assert figures.max_running <= CONCURRENCY
    assert figures.max_per_key <= PER_KEY
    # The limits were reached, not just kept: the test would see a claim that ignored them.
    assert figures.max_running == CONCURRENCY
    assert figures.max_per_key == PER_KEY
    assert figures.runs > JOBS  # the faults did interrupt runs, which ran again
    assert kills >= MIN_KILLS
    assert stops >= MIN_STOPS
