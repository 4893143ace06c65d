"""Exactly-once effects through ``ctx.complete_in`` under crashes: three worker processes run
handlers that write an effect row into the queue's own database and complete their job in the
same transaction, while a seeded schedule SIGKILLs them and SIGSTOPs them past their one-second
lease (and lets them go on), mid-transaction as well as around it. The effect table has no
unique key: only the completion's fence keeps a second effect out.

The checker proves that every job completed, that it has exactly one effect row (not one per
attempt), that the effect is the one of the attempt that completed the job (same attempt, same
process as its result and its attempt record), and that the job's history holds exactly one
completion. On SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import asyncio
import json
import random
import signal
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from caravel import DatabaseQueue, DispatchOptions
from tests.faults.harness import Supervisor, Worker, all_terminal, job_rows, query, wait_until
from tests.faults.joined_app import (
    EFFECTS,
    EVENTS,
    Joined,
    create_joined_schema,
    drop_joined_schema,
    registry,
)

pytestmark = pytest.mark.slow

APP = "tests.faults.joined_app:registry"
QUEUE = "joined"
TENANT = "tenant-j"
SEED = 20261207
LEASE = 1.0
#: Jobs and the handlers' longest pauses per database: SQLite has one writer, so a handler's
#: transaction holds up every other write for its length.
WORKLOAD = {"sqlite": (150, 0.02), "postgresql": (200, 0.1), "mariadb": (200, 0.1)}
KILLS = 6
STOPS = 5


@dataclass
class Figures:
    jobs: int = 0
    completed: int = 0
    effects: int = 0
    executions: int = 0
    reruns: int = 0
    lease_lost: int = 0


def _uuid(value: object) -> str:
    return str(value if isinstance(value, UUID) else UUID(str(value)))


def check_exactly_once(url: str, job_ids: list[str]) -> Figures:
    """Every job completed with exactly one effect, the effect of the attempt that completed it;
    raise AssertionError listing every violation."""
    problems: list[str] = []
    rows = job_rows(url, QUEUE)
    results = {
        _uuid(job_id): json.loads(text) if text is not None else None
        for job_id, text in query(
            url, "SELECT id, result FROM caravel_jobs WHERE queue = ?", (QUEUE,)
        )
    }
    effects: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for job_id, attempt, pid in query(url, f"SELECT job_id, attempt, pid FROM {EFFECTS}"):
        effects[_uuid(job_id)].append((int(attempt), int(pid)))
    completions: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for job_id, attempt, pid in query(
        url, "SELECT job_id, attempt, pid FROM caravel_attempts WHERE outcome = 'completed'"
    ):
        completions[_uuid(job_id)].append((int(attempt), int(pid)))
    events = Counter(event for (event,) in query(url, f"SELECT event FROM {EVENTS}"))
    figures = Figures(jobs=len(job_ids), executions=events["start"], lease_lost=events["lost"])
    figures.reruns = figures.executions - figures.jobs
    figures.effects = sum(len(found) for found in effects.values())
    for job_id in job_ids:
        row = rows.get(job_id)
        if row is None or row.state != "completed":
            problems.append(f"job {job_id} is {row.state if row else 'missing'}")
            continue
        figures.completed += 1
        found = effects.get(job_id, [])
        if len(found) != 1:
            problems.append(f"job {job_id} has {len(found)} effect rows: {found}")
            continue
        result = results.get(job_id)
        expected = (result or {}).get("attempt"), (result or {}).get("pid")
        if found[0] != expected:
            problems.append(f"job {job_id}: effect {found[0]} but result says {expected}")
        if completions.get(job_id) != found:
            problems.append(f"job {job_id}: completions {completions.get(job_id)}, effect {found}")
    unknown = set(effects) - set(job_ids)
    if unknown:
        problems.append(f"effects of unknown jobs: {sorted(unknown)[:3]}")
    assert not problems, "\n".join(problems[:20])
    return figures


def enqueue(url: str, jobs: list[Joined]) -> list[str]:
    async def go() -> list[str]:
        dispatch = DispatchOptions(queue=QUEUE, tenant_id=TENANT, max_attempts=25)
        async with DatabaseQueue(url, registry) as queue:
            made = await queue.enqueue_many([(job, dispatch) for job in jobs])
        return [str(result.job_id) for result in made]

    return asyncio.run(go())


def _handling(worker: Any) -> bool:
    return "processing" in worker.log()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mariadb"])
def test_effects_commit_exactly_once_through_kills_and_stops(
    backend: str, db_url: str, logs: Path
) -> None:
    rng = random.Random(SEED)
    count, pause = WORKLOAD[backend]
    create_joined_schema(db_url)
    started = time.monotonic()
    try:
        job_ids = enqueue(
            db_url, [Joined(value=n, before=pause, after=pause, seed=SEED) for n in range(count)]
        )
        events: Counter[str] = Counter()
        with Supervisor(
            db_url,
            db_url,
            logs,
            workers=3,
            concurrency=2,
            app=APP,
            queues=(QUEUE,),
            lease_duration=LEASE,
        ) as supervisor:
            wait_until(
                lambda: sum(_handling(w) for w in supervisor.alive()) == 3,
                what="three workers to start",
            )
            schedule = ["kill"] * KILLS + ["stop"] * STOPS
            rng.shuffle(schedule)
            while schedule and not all_terminal(db_url, count, QUEUE):
                time.sleep(rng.uniform(0.05, 0.3))
                ready = [w for w in supervisor.running() if _handling(w)]
                if not ready:
                    continue  # a restarted worker is still starting
                victim, action = rng.choice(ready), schedule.pop()
                if action == "kill":
                    supervisor.signal(victim, signal.SIGKILL)
                else:
                    # Past its lease: another worker may take its jobs over meanwhile.
                    supervisor.signal(victim, signal.SIGSTOP)
                    time.sleep(rng.uniform(0.5, 1.6) * LEASE)
                    supervisor.signal(victim, signal.SIGCONT)
                events[action] += 1
            wait_until(
                lambda: all_terminal(db_url, count, QUEUE), timeout=90, what="every job to finish"
            )
        crashes = supervisor.crashes()
        figures = check_exactly_once(db_url, job_ids)
    finally:
        drop_joined_schema(db_url)
    assert events["kill"] >= 1
    assert events["stop"] >= 1
    # The only exits are the kills: SQLite's single writer, shared by the handlers'
    # transactions and the workers' own, never stopped a worker.
    assert [c.returncode for c in crashes] == [-signal.SIGKILL] * events["kill"]
    assert figures.completed == count
    assert figures.effects == count
    assert figures.reruns >= 1  # the faults did interrupt executions
    print(
        "figures",
        backend,
        {
            **figures.__dict__,
            **events,
            "seconds": round(time.monotonic() - started, 1),
        },
    )


def _events_of(url: str) -> list[tuple[str, int, int]]:
    rows = query(url, f"SELECT event, attempt, pid FROM {EVENTS}")
    return sorted((str(event), int(attempt), int(pid)) for event, attempt, pid in rows)


@pytest.mark.parametrize("backend", ["postgresql", "mariadb"])
def test_a_transaction_stopped_past_its_lease_loses_to_the_takeover(
    backend: str, db_url: str, logs: Path
) -> None:
    """A worker frozen between its effect and its completion, past its lease: another worker
    takes the job over and completes it; the frozen one, let go, finds its lease lost, and its
    effect rolls back. (Not on SQLite: there the frozen transaction holds the one writer lock,
    so nothing can take the job over until it goes on.)"""
    create_joined_schema(db_url)
    workers = [
        Worker(
            db_url, db_url, logs / f"worker-{n}.log", app=APP, queues=(QUEUE,), lease_duration=LEASE
        )
        for n in range(2)
    ]
    try:
        for worker in workers:
            wait_until(lambda w=worker: _handling(w), what="the workers to start")
        (job_id,) = enqueue(db_url, [Joined(value=1, stall=2.5 * LEASE)])
        wait_until(lambda: _events_of(db_url) != [], interval=0.005, what="the first attempt")
        ((_, _, pid),) = _events_of(db_url)
        stale = next(w for w in workers if w.pid == pid)
        other = next(w for w in workers if w is not stale)
        stale.signal(signal.SIGSTOP)
        wait_until(
            lambda: job_rows(db_url, QUEUE)[job_id].state == "completed",
            what="the takeover to complete the job",
        )
        stale.signal(signal.SIGCONT)
        wait_until(
            lambda: ("lost", 1, stale.pid) in _events_of(db_url),
            what="the frozen attempt to find its lease lost",
        )
        figures = check_exactly_once(db_url, [job_id])
        events = _events_of(db_url)
        effects = query(db_url, f"SELECT attempt, pid FROM {EFFECTS}")
    finally:
        codes = [worker.terminate() for worker in workers]
        drop_joined_schema(db_url)
    assert codes == [0, 0], [w.log() for w in workers]
    # The frozen attempt began and lost its completion; the other worker's attempts (one, or
    # more when a loaded machine let a one-second lease lapse) wrote the one effect.
    assert [(e, a) for e, a, p in events if p == stale.pid] == [("lost", 1), ("start", 1)], events
    theirs = [(e, a) for e, a, p in events if p == other.pid]
    assert theirs, events
    assert all(e == "start" and a >= 2 for e, a in theirs), events
    assert [tuple(row) for row in effects] == [(max(a for _, a in theirs), other.pid)]
    assert (figures.effects, figures.lease_lost) == (1, 1)
