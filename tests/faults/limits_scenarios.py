"""The flow-control fault scenarios, shared by the fault suite (``test_limits_faults.py``) and the
soak (``soak.py``): :class:`~tests.faults.limits_app.Slot` jobs on a queue with concurrency
limits (:data:`LIMITS`), with a rate (:data:`RATED`), or with both (:data:`COMBINED`), worked by
several worker processes while a seeded schedule SIGKILLs them (a supervisor restarts them),
SIGSTOPs them past their leases and, given a proxy, resets every connection to the server; then
the checker over the handlers' own records (:func:`~tests.faults.limits_app.check_records`,
:func:`~tests.faults.limits_app.check_rate_records`) and, under both limits, over the jobs'
effects (:func:`tests.faults.harness.check`).

:data:`COMBINED` runs four workers; on PostgreSQL and MariaDB, given a
:class:`~tests.faults.netns.NetworkHost` (:func:`second_host`), two of them run on that second
network host and reach the server through a :class:`~tests.faults.proxy.FaultProxy` on its link.
SQLite keeps all four on this host, on one file.

:func:`run_scenario` with no ``duration`` enqueues one batch and stops the faults once every job
finished (the fault suite). With a ``duration`` it keeps the queue fed for that long, adding a
quarter of a batch whenever fewer than that wait, so the workers always have more than the
limits let them run, then carries on until every job finished (the soak). :func:`check_limits`,
:func:`check_rate` and :func:`check_combined` judge a run the same way in both: they return its
figures or raise :class:`LimitsBroken`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from caravel import DatabaseQueue, DispatchOptions, JobRegistry, QueueOptions
from tests.faults.effects_app import is_sqlite
from tests.faults.harness import (
    CheckFailed,
    Supervisor,
    Worker,
    all_terminal,
    check,
    job_rows,
    job_states,
    wait_until,
)
from tests.faults.limits_app import (
    COMBINED_QUEUE,
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
    combined_registry,
    rated_registry,
    registry,
)
from tests.faults.netns import NetworkHost, namespaces_unavailable, network_host
from tests.faults.proxy import FaultProxy

__all__ = [
    "CHECKS",
    "COMBINED",
    "LIMITS",
    "RATED",
    "SCENARIOS",
    "Faults",
    "LimitsBroken",
    "Run",
    "Scenario",
    "check_combined",
    "check_limits",
    "check_rate",
    "run_scenario",
    "second_host",
]

KEYS = 8
LEASE = 1.5
WORKERS = 3
SLOTS_PER_WORKER = 6  # eighteen handler slots or more: more than the limits and the rate allow
MAX_ATTEMPTS = 50
MIN_KILLS = 6
MIN_STOPS = 4
#: With a second host, the kills and the stops each host's workers must get at least.
MIN_PER_HOST = 2
#: Under a proxy, the share of the schedule's actions that reset every connection.
RESET_SHARE = 0.1
#: Faults sent after the feeding stopped without every job finishing: the jobs never will.
MAX_FAULTS_AFTER_FEEDING = 200
#: The names of the hosts in the figures.
THIS_HOST = "this host"
SECOND_HOST = "second host"


def _short(rng: random.Random) -> float:
    return rng.uniform(0.05, 0.25)


def _short_and_long(rng: random.Random) -> float:
    """Half the jobs short, half up to two thirds of a lease: at the rate's 20 claims a second
    about ten run at once on average, so both the rate and the concurrency limit bind in turn."""
    return rng.uniform(0.02, 0.1) if rng.random() < 0.5 else rng.uniform(0.5, 1.0)


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
    #: Worker processes (each with :data:`SLOTS_PER_WORKER` handler slots).
    workers: int = WORKERS
    #: Whether, on a database server (not SQLite), half the workers run on a second network host
    #: (:func:`second_host`).
    two_hosts: bool = False
    #: Each job's sleep in seconds, drawn from the run's generator.
    sleep: Callable[[random.Random], float] = _short
    #: The seconds between two of the schedule's actions, drawn uniformly from this range.
    pace: tuple[float, float] = (0.3, 0.8)


LIMITS = Scenario("limits", QUEUE, "tests.faults.limits_app:registry", registry, batch=400)
RATED = Scenario(
    "rate", RATED_QUEUE, "tests.faults.limits_app:rated_registry", rated_registry, batch=300
)
COMBINED = Scenario(
    "combined",
    COMBINED_QUEUE,
    "tests.faults.limits_app:combined_registry",
    combined_registry,
    batch=400,
    workers=4,
    two_hosts=True,
    sleep=_short_and_long,
    # Four workers restarting on two cores: a slower pace leaves some working between faults.
    pace=(0.5, 1.5),
)
SCENARIOS = {scenario.name: scenario for scenario in (LIMITS, RATED, COMBINED)}


@contextlib.contextmanager
def second_host(scenario: Scenario, db_url: str) -> Iterator[NetworkHost | None]:
    """The network host :func:`run_scenario` puts half of ``scenario``'s workers on: a new
    network namespace when the scenario wants two hosts and the database is not SQLite, else
    ``None``. Raises ``RuntimeError`` naming why when namespaces cannot be made (the fault suite
    calls :func:`tests.faults.netns.require_namespaces` first, to skip or fail)."""
    if not scenario.two_hosts or is_sqlite(db_url):
        yield None
        return
    reason = namespaces_unavailable()
    if reason is not None:
        raise RuntimeError(f"the {scenario.name} scenario needs a second network host: {reason}")
    with network_host() as host:
        yield host


@dataclass
class Faults:
    kills: int = 0
    stops: int = 0
    resets: int = 0
    #: Kills and stops by host (``(host, "kills")``), when the workers ran on two.
    by_host: Counter[tuple[str, str]] = field(default_factory=Counter)


@dataclass
class Run:
    """What :func:`run_scenario` did, for the checkers."""

    scenario: Scenario
    backend: str
    queue_url: str
    app_url: str
    jobs: int
    job_ids: list[str]
    faults: Faults
    records: Path
    #: Every worker's stderr, oldest first.
    logs: str
    #: The hosts the workers ran on, with how many workers each.
    hosts: dict[str, int]
    #: The process ids of every worker each host ran, restarts included.
    pids: dict[str, list[int]]
    #: Job states at the end, of the scenario's queue.
    states: Counter[str]
    #: Attempts spent over every job: the claims made, witnessed by a handler or not.
    claims: int
    restarts: int
    worker_exits: dict[int, int]
    seconds: float
    min_kills: int = MIN_KILLS
    min_stops: int = MIN_STOPS


async def _enqueue(
    url: str, scenario: Scenario, rng: random.Random, first: int, count: int
) -> list[str]:
    """Enqueue ``count`` Slot jobs numbered from ``first``, on random keys; their ids."""
    options = QueueOptions(max_attempts=MAX_ATTEMPTS)
    async with DatabaseQueue(url, scenario.registry, options=options) as queue:
        results = await queue.enqueue_many(
            [
                (
                    Slot(key=f"k{rng.randrange(KEYS)}", n=n, sleep=scenario.sleep(rng)),
                    DispatchOptions(queue=scenario.queue, tenant_id=f"tenant-{n % 3}"),
                )
                for n in range(first, first + count)
            ]
        )
    return [str(result.job_id) for result in results]


@dataclass
class _Fleet:
    """The workers of a run, by host: each host's supervisor and the proxies whose
    connections a reset severs."""

    supervisors: dict[str, Supervisor]
    resettable: list[FaultProxy]

    def ready(self) -> list[tuple[str, Worker]]:
        """Workers running, not stopped, and past their start, with their host."""
        return [
            (name, worker)
            for name, supervisor in self.supervisors.items()
            for worker in supervisor.running()
            if "processing" in worker.log()
        ]

    def started(self) -> int:
        return sum(
            "processing" in worker.log()
            for supervisor in self.supervisors.values()
            for worker in supervisor.alive()
        )


@contextlib.contextmanager
def _fleet(
    scenario: Scenario,
    db_url: str,
    app_url: str,
    directory: Path,
    records: Path,
    proxy: FaultProxy | None,
    host: NetworkHost | None,
) -> Iterator[_Fleet]:
    """Start the scenario's workers: on this host, through ``proxy`` if given; and with
    ``host``, half of them inside it, through a proxy on its link. The handlers there read their
    rows and write their effects over proxies of their own, which are never reset."""
    options: dict[str, Any] = {
        "concurrency": SLOTS_PER_WORKER,
        "lease_duration": LEASE,
        "queues": (scenario.queue,),
        "app": scenario.app,
    }
    remote = scenario.workers // 2 if host is not None else 0
    with contextlib.ExitStack() as stack:
        supervisors: dict[str, Supervisor] = {}
        resettable: list[FaultProxy] = []
        if proxy is not None:
            resettable.append(proxy)
        if host is not None:
            inward = stack.enter_context(FaultProxy.to(db_url, listen_host=host.host_address))
            reads = stack.enter_context(FaultProxy.to(db_url, listen_host=host.host_address))
            effects = stack.enter_context(FaultProxy.to(app_url, listen_host=host.host_address))
            if proxy is not None:
                resettable.append(inward)
        supervisors[THIS_HOST] = stack.enter_context(
            Supervisor(
                proxy.url(db_url) if proxy is not None else db_url,
                app_url,
                directory / "logs",
                workers=scenario.workers - remote,
                # The handlers read their rows straight from the database, never through the
                # proxy.
                env={RECORDS_ENV: str(records), QUEUE_URL_ENV: db_url},
                **options,
            )
        )
        if host is not None:
            supervisors[SECOND_HOST] = stack.enter_context(
                Supervisor(
                    inward.url(db_url),
                    effects.url(app_url),
                    directory / "logs" / "second-host",
                    workers=remote,
                    env={RECORDS_ENV: str(records), QUEUE_URL_ENV: reads.url(db_url)},
                    prefix=host.command(),
                    **options,
                )
            )
        yield _Fleet(supervisors, resettable)


def run_scenario(
    scenario: Scenario,
    db_url: str,
    app_url: str,
    directory: Path,
    rng: random.Random,
    *,
    duration: float = 0.0,
    proxy: FaultProxy | None = None,
    host: NetworkHost | None = None,
    progress: Callable[[float, Counter[str] | None], None] | None = None,
) -> Run:
    """Run ``scenario`` against a migrated, empty queue database and an empty app database,
    keeping the handlers' records in ``directory / "records"`` and the workers' logs in
    ``directory / "logs"``. Faults go on until every job finished, at least :data:`MIN_KILLS`
    kills and :data:`MIN_STOPS` stops were sent (with ``host``, :data:`MIN_PER_HOST` of each
    to each host's workers), and ``duration`` seconds passed; meanwhile the queue is fed. With
    ``proxy`` this host's workers reach the server through it and some actions reset every
    connection (the second host's workers' too). With ``host`` (a server), half the workers
    run inside that network namespace."""
    records = directory / "records"
    records.mkdir(parents=True)
    ids = asyncio.run(_enqueue(db_url, scenario, rng, 0, scenario.batch))
    faults = Faults()
    continued: list[threading.Timer] = []
    started = time.monotonic()
    feeding_until = started + duration
    after_feeding = 0
    with _fleet(scenario, db_url, app_url, directory, records, proxy, host) as fleet:
        hosts = {name: supervisor.count for name, supervisor in fleet.supervisors.items()}

        def faulted_enough() -> bool:
            if faults.kills < MIN_KILLS or faults.stops < MIN_STOPS:
                return False
            return len(hosts) == 1 or all(
                faults.by_host[name, kind] >= MIN_PER_HOST
                for name in hosts
                for kind in ("kills", "stops")
            )

        wait_until(
            lambda: fleet.started() == scenario.workers,
            timeout=60,
            what=f"{scenario.workers} workers to start",
        )
        while (
            time.monotonic() < feeding_until
            or not all_terminal(db_url, len(ids))
            or not faulted_enough()
        ):
            # The schedule's pace: real processes are faulted while they work, in real time.
            time.sleep(rng.uniform(*scenario.pace))
            now = time.monotonic()
            if progress is not None:
                progress(now - started, None)
            feeding = now < feeding_until
            top_up = scenario.batch // 4
            if feeding and job_states(db_url, scenario.queue)["ready"] < top_up:
                ids += asyncio.run(_enqueue(db_url, scenario, rng, len(ids), top_up))
            ready = fleet.ready()
            if len(ready) < 2:  # keep one worker working
                continue
            if fleet.resettable and rng.random() < RESET_SHARE:
                for severed in fleet.resettable:
                    severed.reset_all()
                faults.resets += 1
                after_feeding += not feeding
                continue
            name, victim = rng.choice(ready)
            supervisor = fleet.supervisors[name]
            if rng.random() < 0.5:
                supervisor.signal(victim, signal.SIGKILL)
                faults.kills += 1
                faults.by_host[name, "kills"] += 1
            else:
                # Stopped past its lease: its runs stop counting when their leases expire,
                # and it carries on (its writes fenced off) when it is continued.
                supervisor.signal(victim, signal.SIGSTOP)
                faults.stops += 1
                faults.by_host[name, "stops"] += 1
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
        wait_until(lambda: all_terminal(db_url, len(ids)), timeout=120, what="every job to finish")
    supervisors = fleet.supervisors.values()
    exits = Counter(e.returncode for s in supervisors for e in s.crashes())
    return Run(
        scenario=scenario,
        backend=db_url.split(":")[0],
        queue_url=db_url,
        app_url=app_url,
        jobs=len(ids),
        job_ids=ids,
        faults=faults,
        records=records,
        logs="\n".join(s.logs() for s in supervisors),
        hosts=hosts,
        pids={name: [w.pid for w in s.workers_ever()] for name, s in fleet.supervisors.items()},
        states=job_states(db_url, scenario.queue),
        claims=sum(row.attempt for row in job_rows(db_url, scenario.queue).values()),
        restarts=sum(s.restarts for s in supervisors),
        worker_exits=dict(sorted(exits.items())),
        seconds=round(time.monotonic() - started, 1),
    )


class LimitsBroken(AssertionError):
    """A run broke a limit, lost a job, ran one twice with effect, or did not fault or load the
    queue enough to tell."""

    def __init__(self, problems: list[str], figures: dict[str, Any]) -> None:
        self.problems = problems
        self.figures = figures
        shown = "\n  ".join(problems)
        super().__init__(f"{len(problems)} problem(s):\n  {shown}\nfigures: {figures}")


def _common(run: Run) -> tuple[dict[str, Any], list[str]]:
    figures: dict[str, Any] = {
        "backend": run.backend,
        "scenario": run.scenario.name,
        "hosts": run.hosts,
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
    if len(run.hosts) > 1:
        by_host = {
            name: {
                "runs": _runs_of(run.records, run.pids[name]),
                **{kind: run.faults.by_host[name, kind] for kind in ("kills", "stops")},
            }
            for name in run.hosts
        }
        figures["by_host"] = by_host
        problems += [
            f"{count} {kind} on the {name}'s workers, fewer than {least}"
            for name, counts in by_host.items()
            for kind, count in counts.items()
            for least in [1 if kind == "runs" else MIN_PER_HOST]
            if count < least
        ]
    return figures, problems


def _runs_of(records: Path, pids: list[int]) -> int:
    """The handler runs the processes ``pids`` started (each writes its own records file)."""
    return sum(
        json.loads(line)["e"] == "start"
        for pid in pids
        if (records / f"{pid}.jsonl").exists()
        for line in (records / f"{pid}.jsonl").read_text().splitlines()
    )


def _concurrency(run: Run, figures: dict[str, Any], problems: list[str]) -> None:
    """The concurrency limits held (:func:`check_records`) and were reached."""
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
    if found.max_running > CONCURRENCY or found.max_per_key > PER_KEY:
        figures["peak_runs"] = found.peak  # which runs overlapped, and from which processes
    # The limits were reached, not just kept: the check would see a claim that ignored them.
    if found.max_running < CONCURRENCY:
        problems.append(f"at most {found.max_running} runs at once: {CONCURRENCY} never reached")
    if found.max_per_key < PER_KEY:
        problems.append(f"at most {found.max_per_key} runs of a key at once: {PER_KEY} never")
    if found.runs <= run.jobs:
        problems.append(f"{found.runs} handler runs of {run.jobs} jobs: no run ran again")


def _rate(run: Run, figures: dict[str, Any], problems: list[str]) -> None:
    """The rate held over the claim times the handlers read (:func:`check_rate_records`) and
    was reached, and each job's last claim was witnessed."""
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


def _effects(run: Run, figures: dict[str, Any], problems: list[str]) -> None:
    """No job lost or run twice with effect: the fault suite's checker over the queue and the
    app database (every enqueued job completed by its last claim, one effect each)."""
    try:
        found = check(
            run.queue_url,
            run.app_url,
            run.job_ids,
            logs=run.logs,
            queue=run.scenario.queue,
            strict_order=False,  # a stopped worker resuming records a start late
        )
    except CheckFailed as failed:
        problems += failed.problems
        found = failed.figures
    figures |= {
        "effects": found.effects,
        "executions": found.executions,
        "reruns": found.reruns,
        "superseded_outcomes": found.superseded_outcomes,
        "rejected_acks": found.rejected_acks,
        "late_starts": found.late_starts,
    }
    if found.effects != run.jobs:
        problems.append(f"{found.effects} effects for {run.jobs} jobs")


def _checked(run: Run, *parts: Callable[[Run, dict[str, Any], list[str]], None]) -> dict[str, Any]:
    figures, problems = _common(run)
    for part in parts:
        part(run, figures, problems)
    if problems:
        raise LimitsBroken(problems, figures)
    return figures


def check_limits(run: Run) -> dict[str, Any]:
    """The concurrency limits held (:func:`check_records`) and were reached, every job completed,
    and the faults happened; returns the figures, or raises :class:`LimitsBroken`."""
    return _checked(run, _concurrency)


def check_rate(run: Run) -> dict[str, Any]:
    """The rate held over the claim times the handlers read (:func:`check_rate_records`) and was
    reached, every job completed and each job's last claim was witnessed, and the faults
    happened; returns the figures, or raises :class:`LimitsBroken`."""
    return _checked(run, _rate)


def check_combined(run: Run) -> dict[str, Any]:
    """Both at once: the concurrency limits and the rate held and were reached, every job
    completed by its last claim with exactly one effect, and the faults happened (to each
    host's workers, with two); returns the figures, or raises :class:`LimitsBroken`."""
    return _checked(run, _concurrency, _rate, _effects)


CHECKS: dict[str, Callable[[Run], dict[str, Any]]] = {
    LIMITS.name: check_limits,
    RATED.name: check_rate,
    COMBINED.name: check_combined,
}
