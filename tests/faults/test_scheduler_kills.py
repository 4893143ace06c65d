"""Schedulers under SIGKILL, on PostgreSQL and MariaDB: three ``caravel worker`` processes of
:mod:`tests.faults.schedule_app` run the same two schedules, due every second (one with
``missed="latest"``, one with ``missed="skip"``), while a seeded driver SIGKILLs one of them
every one to three seconds and restarts it at once, always leaving one that has started; once in
the run it kills them all, keeps them down for a few seconds, and restarts them.

What must hold, read from ``caravel_jobs`` by the slots' idempotency keys
(``schedule:<name>:<slot>``), whatever the timing of the kills:

* one job per slot, every slot on the interval's grid, no job made before its slot, and none made
  later than :data:`~caravel.schedules.ON_TIME_GRACE` after it;
* from the first slot to the last, no slot is missing except one run of slots across the
  all-down window: the slot before it was enqueued by a scheduler alive until the kills, the
  slot after it by a restarted one, and that slot is the newest at the moment the restarted
  scheduler first looked. The outage is far shorter than the grace, so that slot is on time and
  runs under either policy, and the slots between are not caught up: a pass considers only a
  schedule's latest slot, never every missed one (the missed policy itself decides only after
  an outage longer than the grace, which the integration tests cover on a hand-moved clock).

The expected window comes from the times the driver recorded (kills sent, processes dead,
restarts spawned), with a second's slack for a pass in flight; the assertions depend on no
other timing.
"""

from __future__ import annotations

import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path

import pytest

from caravel.schedules import ON_TIME_GRACE, slot_key
from tests.faults.harness import Worker, query, wait_until
from tests.faults.schedule_app import EVERY, SCHEDULES

pytestmark = [pytest.mark.slow, pytest.mark.serial]

SEED = 20261202
WORKERS = 3
#: Seconds of one-at-a-time kills before and after the outage.
CHURN_S = 20.0
#: Seconds every scheduler stays down: several slots, far less than the grace.
OUTAGE_S = 4.0
APP = "tests.faults.schedule_app:registry"
EVERY_MS = EVERY // timedelta(milliseconds=1)
GRACE_MS = ON_TIME_GRACE // timedelta(milliseconds=1)
#: A pass's own time (reading the state, the enqueue's round trip) and a kill's delivery.
SLACK_MS = 1000
#: The same for a fresh process's first pass, whose statements are compiled and prepared first.
FIRST_PASS_SLACK_MS = 3000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def now_ms() -> int:
    """The wall clock the workers' queue clock reads (``caravel.clock.SystemClock``)."""
    return time.time_ns() // 1_000_000


@dataclass
class Outage:
    """When every scheduler was down, in ms on the workers' clock."""

    kills_sent_at: int
    dead_at: int
    restarts_at: int


@dataclass
class Pool:
    """The scheduler processes, one per slot of the pool, restarted in place."""

    queue_url: str
    logs: Path
    workers: list[Worker] = field(default_factory=list)
    retired: list[Worker] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    spawned: int = 0

    def spawn(self, slot: int) -> Worker:
        self.spawned += 1
        path = self.logs / f"scheduler-{slot}-{self.spawned}.log"
        # No app database: the effects app's URL is unused by this app.
        return Worker(self.queue_url, "unused", path, app=APP, queues=["faults"])

    def start(self) -> None:
        self.workers = [self.spawn(slot) for slot in range(WORKERS)]

    @staticmethod
    def started(worker: Worker) -> bool:
        """Its scheduler runs: the worker said "processing", which comes just before."""
        return worker.poll() is None and "processing" in worker.log()

    def kill(self, slots: list[int]) -> None:
        for slot in slots:
            self.workers[slot].signal(signal.SIGKILL)
        for slot in slots:
            code = self.workers[slot].wait(timeout=30)
            assert code == -signal.SIGKILL, self.workers[slot].log()
            self.retired.append(self.workers[slot])
        self.events.append(f"{now_ms()} killed {slots}")

    def restart(self, slots: list[int]) -> None:
        for slot in slots:
            self.workers[slot] = self.spawn(slot)
        self.events.append(f"{now_ms()} restarted {slots}")

    def churn(self, rng: random.Random, seconds: float) -> int:
        """SIGKILL one scheduler every 1-3 s and restart it, as long as another one has
        started; returns the number of kills."""
        kills = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(rng.uniform(1.0, 3.0))  # the schedule: real processes, real time
            victim = rng.randrange(WORKERS)
            others = [w for slot, w in enumerate(self.workers) if slot != victim]
            if not any(self.started(w) for w in others):
                self.events.append(f"{now_ms()} no other scheduler up: kept {victim}")
                continue
            self.kill([victim])
            self.restart([victim])
            kills += 1
        return kills

    def outage(self, seconds: float) -> Outage:
        slots = list(range(WORKERS))
        sent = now_ms()
        self.kill(slots)
        dead = now_ms()
        time.sleep(seconds)  # the outage: real schedulers miss real slots meanwhile
        restarts = now_ms()
        self.restart(slots)
        return Outage(sent, dead, restarts)

    def stop(self) -> None:
        for worker in self.workers:
            worker.terminate()

    def logs_text(self) -> str:
        return "\n".join(w.log() for w in [*self.retired, *self.workers])


def slot_of(name: str, key: str) -> int:
    """The slot (ms) a slot key names; it must be exactly the key :func:`slot_key` makes."""
    text = key.removeprefix(f"schedule:{name}:")
    moment = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    slot = (moment - _EPOCH) // timedelta(milliseconds=1)
    assert slot_key(name, slot) == key
    return slot


def _runs(slots: list[int]) -> list[tuple[int, int]]:
    """Consecutive slots as (first, last) pairs: a failure's message, readable."""
    runs: list[tuple[int, int]] = []
    for slot in slots:
        if runs and slot - runs[-1][1] == EVERY_MS:
            runs[-1] = (runs[-1][0], slot)
        else:
            runs.append((slot, slot))
    return runs


def check_schedule(queue_url: str, name: str, outage: Outage, events: list[str]) -> list[int]:
    """The invariants of one schedule's jobs (see the module docstring); its slots."""
    rows = query(
        queue_url,
        "SELECT idempotency_key, created_at FROM caravel_jobs WHERE idempotency_key LIKE ?",
        (f"schedule:{name}:%",),
    )
    keys = Counter(key for key, _ in rows)
    assert [key for key, n in keys.items() if n > 1] == [], "a slot has more than one job"
    made = {slot_of(name, key): int(created) for key, created in rows}
    slots = sorted(made)
    context = f"{name}: slots {_runs(slots)}, outage {outage}, events {events}"
    assert all(slot % EVERY_MS == 0 for slot in slots), context
    for slot in slots:
        # Never early; never late enough for the missed policy to decide.
        assert slot <= made[slot] < slot + GRACE_MS, (slot, made[slot], context)
    gaps = [(a, b) for a, b in pairwise(slots) if b - a > EVERY_MS]
    assert len(gaps) == 1, f"missing slots outside the all-down window: {gaps}; {context}"
    before, after = gaps[0]
    # Before the gap: enqueued by a scheduler still alive, and no slot due a pass's slack before
    # the kills was lost.
    assert made[before] <= outage.dead_at, context
    assert before >= outage.kills_sent_at - EVERY_MS - SLACK_MS, context
    # After it: enqueued by a restarted scheduler, the newest slot when it first looked (one
    # job, not a catch-up of the slots between).
    assert made[after] >= outage.restarts_at, context
    assert after >= outage.restarts_at - outage.restarts_at % EVERY_MS, context
    assert made[after] - after < EVERY_MS + FIRST_PASS_SLACK_MS, context
    missed = (after - before) // EVERY_MS - 1
    assert missed >= int(OUTAGE_S) - 1, context
    return slots


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param("postgresql", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mariadb),
    ],
)
def test_schedulers_killed_at_random_keep_one_job_per_slot(db_url: str, logs: Path) -> None:
    rng = random.Random(SEED)
    pool = Pool(db_url, logs)
    pool.start()
    try:
        wait_until(
            lambda: all(pool.started(w) for w in pool.workers),
            timeout=30,
            what="the schedulers to start",
        )
        kills = pool.churn(rng, CHURN_S)
        outage = pool.outage(OUTAGE_S)
        kills += pool.churn(rng, CHURN_S)
        wait_until(
            lambda: any(pool.started(w) for w in pool.workers),
            timeout=30,
            what="a scheduler to be up at the end",
        )
        time.sleep(2 * EVERY_MS / 1000)  # a last slot or two under the final set
    finally:
        pool.stop()
    assert kills >= 10, pool.events

    logs_text = pool.logs_text()
    assert "Traceback" not in logs_text, logs_text[-4000:]
    # A peer's death never fails a survivor's pass (a failed pass would skip a slot).
    assert "schedule pass failed" not in logs_text, logs_text[-4000:]
    for name in SCHEDULES:
        slots = check_schedule(db_url, name, outage, pool.events)
        assert len(slots) >= 40, (name, len(slots))
