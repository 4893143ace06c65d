"""The flow-control fault scenarios, shared by the fault suite (``test_limits_faults.py``) and the
soak (``soak.py``): :class:`~tests.faults.limits_app.Slot` jobs on a queue with concurrency
limits (:data:`LIMITS`) or with a rate (:data:`RATED`), worked by three worker processes while a
seeded schedule SIGKILLs them (a supervisor restarts them), SIGSTOPs them past their leases and,
given a proxy, resets every connection to the server; then the checker over the handlers' own
records (:func:`~tests.faults.limits_app.check_records`,
:func:`~tests.faults.limits_app.check_rate_records`).

:func:`run_scenario` with no ``duration`` enqueues one batch and stops the faults once every job
finished (the fault suite). With a ``duration`` it keeps the queue fed for that long, adding a
quarter of a batch whenever fewer than that wait, so the workers always have more than the
limits let them run, then carries on until every job finished (the soak). :func:`check_limits`
and :func:`check_rate` judge a run the same way in both: they return its figures or raise
:class:`LimitsBroken`.
"""

from __future__ import annotations

import asyncio
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

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
from tests.faults.proxy import FaultProxy

__all__ = [
    "CHECKS",
    "LIMITS",
    "RATED",
    "SCENARIOS",
    "Faults",
    "LimitsBroken",
    "Run",
    "Scenario",
    "check_limits",
    "check_rate",
    "run_scenario",
]

KEYS = 8
LEASE = 1.5
WORKERS = 3
SLOTS_PER_WORKER = 6  # eighteen handler slots: more than the limits and the rate allow
MAX_ATTEMPTS = 50
MIN_KILLS = 6
MIN_STOPS = 4
#: Under a proxy, the share of the schedule's actions that reset every connection.
RESET_SHARE = 0.1
#: Faults sent after the feeding stopped without every job finishing: the jobs never will.
MAX_FAULTS_AFTER_FEEDING = 200


@dataclass(frozen=True)
class Scenario:
    name: str
    queue: str
    #: The workers' ``--app``.
    app: str
    registry: JobRegistry
    #: Jobs enqueued at first: the fault suite's whole run. The soak adds a quarter of it
    #: whenever fewer than that wait.
    batch: int


LIMITS = Scenario("limits", QUEUE, "tests.faults.limits_app:registry", registry, batch=400)
RATED = Scenario(
    "rate", RATED_QUEUE, "tests.faults.limits_app:rated_registry", rated_registry, batch=300
)
SCENARIOS = {scenario.name: scenario for scenario in (LIMITS, RATED)}


@dataclass
class Faults:
    kills: int = 0
    stops: int = 0
    resets: int = 0


@dataclass
class Run:
    """What :func:`run_scenario` did, for the checkers."""

    scenario: Scenario
    backend: str
    jobs: int
    faults: Faults
    records: Path
    #: Job states at the end, of the scenario's queue.
    states: Counter[str]
    #: Attempts spent over every job: the claims made, witnessed by a handler or not.
    claims: int
    restarts: int
    worker_exits: dict[int, int]
    seconds: float
    min_kills: int = MIN_KILLS
    min_stops: int = MIN_STOPS


async def _enqueue(url: str, scenario: Scenario, rng: random.Random, first: int, count: int) -> int:
    """Enqueue ``count`` Slot jobs numbered from ``first``, on random keys; how many."""
    options = QueueOptions(max_attempts=MAX_ATTEMPTS)
    async with DatabaseQueue(url, scenario.registry, options=options) as queue:
        await queue.enqueue_many(
            [
                (
                    Slot(key=f"k{rng.randrange(KEYS)}", n=n, sleep=rng.uniform(0.05, 0.25)),
                    DispatchOptions(queue=scenario.queue, tenant_id=f"tenant-{n % 3}"),
                )
                for n in range(first, first + count)
            ]
        )
    return count


def run_scenario(
    scenario: Scenario,
    db_url: str,
    app_url: str,
    directory: Path,
    rng: random.Random,
    *,
    duration: float = 0.0,
    proxy: FaultProxy | None = None,
    progress: Callable[[float, Counter[str] | None], None] | None = None,
) -> Run:
    """Run ``scenario`` against a migrated, empty queue database, keeping the handlers'
    records in ``directory / "records"`` and the workers' logs in ``directory / "logs"``.
    Faults go on until every job finished, at least :data:`MIN_KILLS` kills and
    :data:`MIN_STOPS` stops were sent, and ``duration`` seconds passed; meanwhile the queue is
    fed. With ``proxy`` the workers reach PostgreSQL through it and some actions reset every
    connection."""
    records = directory / "records"
    records.mkdir(parents=True)
    jobs = asyncio.run(_enqueue(db_url, scenario, rng, 0, scenario.batch))
    faults = Faults()
    continued: list[threading.Timer] = []
    started = time.monotonic()
    feeding_until = started + duration
    after_feeding = 0
    with Supervisor(
        proxy.url(db_url) if proxy is not None else db_url,
        app_url,
        directory / "logs",
        workers=WORKERS,
        concurrency=SLOTS_PER_WORKER,
        lease_duration=LEASE,
        queues=(scenario.queue,),
        app=scenario.app,
        # The handlers read their rows straight from the database, never through the proxy.
        env={RECORDS_ENV: str(records), QUEUE_URL_ENV: db_url},
    ) as supervisor:
        wait_until(
            lambda: sum("processing" in w.log() for w in supervisor.alive()) == WORKERS,
            what="three workers to start",
        )
        while (
            time.monotonic() < feeding_until
            or not all_terminal(db_url, jobs)
            or faults.kills < MIN_KILLS
            or faults.stops < MIN_STOPS
        ):
            # The schedule's pace: real processes are faulted while they work, in real time.
            time.sleep(rng.uniform(0.3, 0.8))
            now = time.monotonic()
            if progress is not None:
                progress(now - started, None)
            feeding = now < feeding_until
            top_up = scenario.batch // 4
            if feeding and job_states(db_url, scenario.queue)["ready"] < top_up:
                jobs += asyncio.run(_enqueue(db_url, scenario, rng, jobs, top_up))
            ready = [w for w in supervisor.running() if "processing" in w.log()]
            if len(ready) < 2:  # keep one worker working
                continue
            if proxy is not None and rng.random() < RESET_SHARE:
                proxy.reset_all()
                faults.resets += 1
                after_feeding += not feeding
                continue
            victim = rng.choice(ready)
            if rng.random() < 0.5:
                supervisor.signal(victim, signal.SIGKILL)
                faults.kills += 1
            else:
                # Stopped past its lease: its runs stop counting when their leases expire,
                # and it carries on (its writes fenced off) when it is continued.
                supervisor.signal(victim, signal.SIGSTOP)
                faults.stops += 1
                timer = threading.Timer(
                    rng.uniform(LEASE + 0.5, LEASE + 2.0),
                    supervisor.signal,
                    (victim, signal.SIGCONT),
                )
                timer.start()
                continued.append(timer)
            after_feeding += not feeding
            if after_feeding > MAX_FAULTS_AFTER_FEEDING:
                raise AssertionError("the jobs never finished under the faults")
        for timer in continued:
            timer.join()
        wait_until(lambda: all_terminal(db_url, jobs), timeout=120, what="every job to finish")
    exits = Counter(e.returncode for e in supervisor.crashes())
    return Run(
        scenario=scenario,
        backend=db_url.split(":")[0],
        jobs=jobs,
        faults=faults,
        records=records,
        states=job_states(db_url, scenario.queue),
        claims=sum(row.attempt for row in job_rows(db_url, scenario.queue).values()),
        restarts=supervisor.restarts,
        worker_exits=dict(sorted(exits.items())),
        seconds=round(time.monotonic() - started, 1),
    )


class LimitsBroken(AssertionError):
    """A run broke a limit, lost a job, or did not fault or load the queue enough to tell."""

    def __init__(self, problems: list[str], figures: dict[str, Any]) -> None:
        self.problems = problems
        self.figures = figures
        shown = "\n  ".join(problems)
        super().__init__(f"{len(problems)} problem(s):\n  {shown}\nfigures: {figures}")


def _common(run: Run) -> tuple[dict[str, Any], list[str]]:
    figures: dict[str, Any] = {
        "backend": run.backend,
        "scenario": run.scenario.name,
        "jobs": run.jobs,
        "kills": run.faults.kills,
        "stops": run.faults.stops,
        "resets": run.faults.resets,
        "restarts": run.restarts,
        "worker_exits": run.worker_exits,
        "claims": run.claims,
        "total_s": run.seconds,
    }
    problems: list[str] = []
    if dict(run.states) != {"completed": run.jobs}:  # no job lost, none dead-lettered
        problems.append(f"not every one of {run.jobs} jobs completed: {dict(run.states)}")
    if run.claims <= run.jobs:
        problems.append(f"{run.claims} claims of {run.jobs} jobs: the faults interrupted none")
    if run.faults.kills < run.min_kills:
        problems.append(f"{run.faults.kills} kills, fewer than {run.min_kills}")
    if run.faults.stops < run.min_stops:
        problems.append(f"{run.faults.stops} stops, fewer than {run.min_stops}")
    return figures, problems


def check_limits(run: Run) -> dict[str, Any]:
    """The concurrency limits held (:func:`check_records`) and were reached, every job completed,
    and the faults happened; returns the figures, or raises :class:`LimitsBroken`."""
    figures, problems = _common(run)
    found = check_records(run.records)
    figures |= {
        "handler_runs": found.runs,
        "runs_cut_short": found.unfinished,
        "max_running": found.max_running,
        "max_per_key": found.max_per_key,
        "limits": {"concurrency": CONCURRENCY, "per_key": PER_KEY},
    }
    if found.max_running > CONCURRENCY:
        problems.append(f"{found.max_running} runs at once, over the limit of {CONCURRENCY}")
    if found.max_per_key > PER_KEY:
        problems.append(f"{found.max_per_key} runs of one key at once, over {PER_KEY}")
    # The limits were reached, not just kept: the check would see a claim that ignored them.
    if found.max_running < CONCURRENCY:
        problems.append(f"at most {found.max_running} runs at once: {CONCURRENCY} never reached")
    if found.max_per_key < PER_KEY:
        problems.append(f"at most {found.max_per_key} runs of a key at once: {PER_KEY} never")
    if found.runs <= run.jobs:
        problems.append(f"{found.runs} handler runs of {run.jobs} jobs: no run ran again")
    if problems:
        raise LimitsBroken(problems, figures)
    return figures


def check_rate(run: Run) -> dict[str, Any]:
    """The rate held over the claim times the handlers read (:func:`check_rate_records`) and was
    reached, every job completed and each job's last claim was witnessed, and the faults
    happened; returns the figures, or raises :class:`LimitsBroken`."""
    figures, problems = _common(run)
    period_ms = round(RATE_PERIOD / timedelta(milliseconds=1))
    found = check_rate_records(run.records, period_ms)
    figures |= {
        "claims_witnessed": found.witnessed,
        "max_starts_in_any_window": found.max_in_window,
        "rate": {"rate": RATE, "period_ms": period_ms},
    }
    if found.max_in_window > RATE:
        problems.append(f"{found.max_in_window} claims within {period_ms} ms, over {RATE}")
    # The rate was reached, not just kept: the check would see a claim that ignored it.
    if found.max_in_window < RATE:
        problems.append(f"at most {found.max_in_window} claims in a window: {RATE} never reached")
    if found.witnessed < run.jobs:  # at least each job's last claim was seen
        problems.append(f"{found.witnessed} claims witnessed, fewer than the {run.jobs} jobs")
    if problems:
        raise LimitsBroken(problems, figures)
    return figures


CHECKS: dict[str, Callable[[Run], dict[str, Any]]] = {
    LIMITS.name: check_limits,
    RATED.name: check_rate,
}
