"""Concurrency limits under crashes: three worker processes (eighteen handler slots) share a
queue limited to 10 running jobs and 2 per partition key, while a seeded schedule SIGKILLs
workers (a supervisor restarts them) and SIGSTOPs others past their leases. The handlers' own
start and end records (:mod:`tests.faults.limits_app`) must show the limits never exceeded,
counting a run whose lease expired as finished only from that moment, and every job must
complete. On SQLite the processes share one file on one host; on PostgreSQL one database.

The rate under the same faults: three worker processes on a queue allowed 20 starts a second;
the claim times the handlers read from their jobs' rows must never hold more than 20 within any
second, and every job must complete."""

from __future__ import annotations

import asyncio
import random
import signal
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

from caravel import DatabaseQueue, DispatchOptions, JobRegistry, QueueOptions
from tests.faults.harness import Supervisor, all_terminal, job_rows, job_states, wait_until
from tests.faults.limits_app import (
    CONCURRENCY,
    PER_KEY,
    QUEUE,
    QUEUE_URL_ENV,
    RATE,
    RATE_PERIOD,
    RATED_QUEUE,
    RECORDS_ENV,
    Slot,
    check_rate_records,
    check_records,
    rated_registry,
    registry,
)

pytestmark = pytest.mark.slow

SEED = 20261203
JOBS = 400
KEYS = 8
LEASE = 1.5
MIN_KILLS = 6
MIN_STOPS = 4


RATED_JOBS = 300


async def _enqueue(
    url: str,
    rng: random.Random,
    *,
    jobs: int = JOBS,
    queue_name: str = QUEUE,
    app: JobRegistry = registry,
) -> None:
    options = QueueOptions(max_attempts=50)
    async with DatabaseQueue(url, app, options=options) as queue:
        await queue.enqueue_many(
            [
                (
                    Slot(key=f"k{rng.randrange(KEYS)}", n=n, sleep=rng.uniform(0.05, 0.25)),
                    DispatchOptions(queue=queue_name, tenant_id=f"tenant-{n % 3}"),
                )
                for n in range(jobs)
            ]
        )


def _run_faults(
    db_url: str, app_url: str, logs: Path, rng: random.Random, jobs: int, **workers: object
) -> tuple[int, int]:
    """Run three worker processes until ``jobs`` are all finished, SIGKILLing and SIGSTOPping
    them (past their leases) at random meanwhile; how many kills and stops were sent."""
    kills = stops = 0
    continued: list[threading.Timer] = []
    with Supervisor(
        db_url,
        app_url,
        logs,
        workers=3,
        concurrency=6,
        lease_duration=LEASE,
        **workers,  # type: ignore[arg-type]
    ) as supervisor:
        wait_until(
            lambda: sum("processing" in w.log() for w in supervisor.alive()) == 3,
            what="three workers to start",
        )
        while not all_terminal(db_url, jobs) or kills < MIN_KILLS or stops < MIN_STOPS:
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
        wait_until(lambda: all_terminal(db_url, jobs), timeout=120, what="every job to finish")
    return kills, stops


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_limits_hold_while_workers_are_killed_and_stopped(
    db_url: str, app_url: str, logs: Path, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    records = tmp_path / "records"
    records.mkdir()
    asyncio.run(_enqueue(db_url, rng))
    env = {RECORDS_ENV: str(records), QUEUE_URL_ENV: db_url}
    kills, stops = _run_faults(
        db_url,
        app_url,
        logs,
        rng,
        JOBS,
        queues=(QUEUE,),
        app="tests.faults.limits_app:registry",
        env=env,
    )

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


# This checker once saw 21 claims within one second under a rate of 20: a claim whose clock was
# read before it waited its turn ran after one with a later clock, which had deleted starts still
# inside the first one's window (see caravel.flow.window.window_clock).
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_rate_holds_while_workers_are_killed_and_stopped(
    db_url: str, app_url: str, logs: Path, tmp_path: Path
) -> None:
    rng = random.Random(SEED + 1)
    records = tmp_path / "records"
    records.mkdir()
    asyncio.run(_enqueue(db_url, rng, jobs=RATED_JOBS, queue_name=RATED_QUEUE, app=rated_registry))
    env = {RECORDS_ENV: str(records), QUEUE_URL_ENV: db_url}
    kills, stops = _run_faults(
        db_url,
        app_url,
        logs,
        rng,
        RATED_JOBS,
        queues=(RATED_QUEUE,),
        app="tests.faults.limits_app:rated_registry",
        env=env,
    )

    states = job_states(db_url, RATED_QUEUE)
    # Every claim spent an attempt (none ran out of them): the claims made, witnessed or not.
    claims = sum(row.attempt for row in job_rows(db_url, RATED_QUEUE).values())
    period_ms = round(RATE_PERIOD / timedelta(milliseconds=1))
    figures = check_rate_records(records, period_ms)
    print(
        "rate-figures",
        {
            "backend": db_url.split(":")[0],
            "jobs": RATED_JOBS,
            "kills": kills,
            "stops": stops,
            "claims": claims,
            "claims_witnessed": figures.witnessed,
            "max_starts_in_any_window": figures.max_in_window,
            "rate": {"rate": RATE, "period_ms": period_ms},
        },
    )
    assert states == {"completed": RATED_JOBS}  # no job lost, none dead-lettered
    assert figures.max_in_window <= RATE
    # The rate was reached, not just kept: the test would see a claim that ignored it.
    assert figures.max_in_window == RATE
    assert claims > RATED_JOBS  # the faults did interrupt runs, which were claimed again
    assert figures.witnessed >= RATED_JOBS  # at least each job's last claim was seen
    assert kills >= MIN_KILLS
    assert stops >= MIN_STOPS
