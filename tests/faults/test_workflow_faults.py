"""Workflows under crashes: four worker processes work a 1,000-member fan-out into one fan-in,
diamonds (A before B and C, both before D) and a graph whose first step always fails (one step
after it runs anyway, ``on_failure="continue"``, another stays held), while a seeded schedule
SIGKILLs workers (a supervisor restarts them) and SIGSTOPs others past their short leases, and
the fan-in's worker is SIGKILLed during the fan-in's first run.

The handlers write their records into a table of their own in the queue database, and triggers
of the test's own keep a trail of every step row's counter and release and of every workflow
job's state and due time (:mod:`tests.faults.workflow_app`). Afterwards
:func:`~tests.faults.workflow_checks.check_workflows` proves every step completed exactly once
by its last claim, none started before all its dependencies had finished, each was released
exactly once with its counter never below zero, and the fan-in read all 1,000 results by step
name through the paged reader.

On PostgreSQL the queue is a fresh database on this test process's own cluster
(``pg_cluster``), on MariaDB on its own server (``mariadb_server``): four workers with their
pools, beside the other tests' on the shared servers, would crowd them. On SQLite the four
processes share one file.
"""

from __future__ import annotations

import asyncio
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from caravel import DatabaseQueue, DispatchOptions, Workflow
from caravel.limits import HELD_DUE_AT
from tests.faults.harness import Supervisor, Worker, query, wait_until
from tests.faults.workflow_app import (
    QUEUE,
    QUEUE_URL_ENV,
    TENANT,
    FailingStep,
    WfStep,
    install_records,
    registry,
)
from tests.faults.workflow_checks import Expected, WorkflowBroken, check_workflows

pytestmark = pytest.mark.slow

SEED = 20261207
FAN = 1_000
DIAMONDS = 20
WORKERS = 4
CONCURRENCY = 6
LEASE = 1.5
MAX_ATTEMPTS = 50
MIN_KILLS = 6
MIN_STOPS = 4
#: Seconds between the schedule's faults, until the minimum is reached and after.
PACE = (0.3, 0.8)
LATER_PACE = (0.8, 1.6)
#: How long the fan-in's handler waits after its start record: the window in which its worker is
#: killed on the first run.
FAN_IN_SLEEP = 0.6
APP = "tests.faults.workflow_app:registry"


@pytest.fixture
def queue_url(backend: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh migrated queue database with the records' tables and the audit triggers."""
    if backend == "sqlite":
        url: str = request.getfixturevalue("db_url")
        install_records(url)
        yield url
        return
    server = request.getfixturevalue("mariadb_server" if backend == "mariadb" else "pg_cluster")
    server.ensure_running()
    with server.database(migrated=True) as url:
        install_records(url)
        yield url


def _options(max_attempts: int = MAX_ATTEMPTS) -> DispatchOptions:
    return DispatchOptions(queue=QUEUE, tenant_id=TENANT, max_attempts=max_attempts)


@dataclass
class Graphs:
    """What was enqueued: each step's job ids, and what each should end as."""

    workflow_ids: dict[str, list[UUID]] = field(default_factory=dict)
    expected: dict[UUID, Expected] = field(default_factory=dict)
    fan_in: UUID | None = None


def _build(
    rng: random.Random, fan_width: int, diamonds: int
) -> list[tuple[str, Workflow, dict[str, Expected]]]:
    """The graphs: a fan-out of ``fan_width`` into a fan-in, ``diamonds`` diamonds, and the
    graph whose first step fails; each with what its steps should end as."""
    fan = Workflow("fan", tenant_id=TENANT)
    fan.add("root", WfStep(), options=_options())
    fan.add_many(
        "fan",
        [WfStep(sleep=round(rng.uniform(0.01, 0.1), 3)) for _ in range(fan_width)],
        after=["root"],
        options=_options(),
    )
    seen_all = {
        "count": fan_width,
        "indexes_exact": True,
        "own_results": fan_width,
        "completed": fan_width,
    }
    fan.add(
        "fan-in",
        WfStep(role="fan_in", group="fan", expect=fan_width, sleep=FAN_IN_SLEEP),
        after=["fan"],
        options=_options(),
    )
    done = Expected("completed")
    graphs = [
        ("fan", fan, {"root": done, "fan": done, "fan-in": Expected("completed", detail=seen_all)})
    ]
    for _ in range(diamonds):
        diamond = Workflow("diamond", tenant_id=TENANT)
        diamond.add("a", WfStep(sleep=0.05), options=_options())
        diamond.add(
            "b", WfStep(sleep=round(rng.uniform(0.0, 0.2), 3)), after=["a"], options=_options()
        )
        diamond.add(
            "c", WfStep(sleep=round(rng.uniform(0.0, 0.2), 3)), after=["a"], options=_options()
        )
        diamond.add(
            "d", WfStep(role="join", reads=("b", "c")), after=["b", "c"], options=_options()
        )
        joined = Expected("completed", detail={"own_results": 2})
        graphs.append(("diamond", diamond, {"a": done, "b": done, "c": done, "d": joined}))
    failing = Workflow("continue", tenant_id=TENANT)
    failing.add("x", FailingStep(), options=_options(max_attempts=2))
    failing.add(
        "y", WfStep(role="continue"), after=["x"], on_failure="continue", options=_options()
    )
    failing.add("w", WfStep(), after=["y"], options=_options())
    failing.add("z", WfStep(), after=["x"], options=_options())
    saw_x = Expected(
        "completed", policy="continue", detail={"failed": [["x", None, "dead_letter"]]}
    )
    graphs.append(
        (
            "continue",
            failing,
            {"x": Expected("dead_letter"), "y": saw_x, "w": done, "z": Expected("held")},
        )
    )
    return graphs


def _enqueue(
    url: str, rng: random.Random, fan_width: int = FAN, diamonds: int = DIAMONDS
) -> Graphs:
    async def go() -> Graphs:
        graphs = Graphs()
        async with DatabaseQueue(url, registry) as queue:
            for kind, workflow, wanted in _build(rng, fan_width, diamonds):
                made = await queue.enqueue_workflow(workflow)
                graphs.workflow_ids.setdefault(kind, []).append(made.workflow_id)
                for step, ids in made.step_ids.items():
                    for job_id in ids:
                        graphs.expected[job_id] = wanted[step]
                if kind == "fan":
                    graphs.fan_in = made.step_ids["fan-in"][0]
        return graphs

    return asyncio.run(go())


def _live(url: str) -> int:
    """Jobs of the queue that are running or ready to run (not held)."""
    rows = query(
        url,
        "SELECT count(*) FROM caravel_jobs WHERE queue = ? AND (state = 'running'"
        " OR (state = 'ready' AND due_at <> ?))",
        (QUEUE, HELD_DUE_AT),
    )
    return int(rows[0][0])


def _fan_in_first_run(url: str) -> int | None:
    """The process that ran the fan-in's first recorded start (it may have died since)."""
    rows = query(
        url, "SELECT pid FROM wf_runs WHERE step = 'fan-in' AND event = 'start' ORDER BY id"
    )
    return int(rows[0][0]) if rows else None


@dataclass
class Faults:
    kills: int = 0
    stops: int = 0
    fan_in_killed: bool = False


def _kill_fan_in(url: str, supervisor: Supervisor, faults: Faults, stop: threading.Event) -> None:
    """SIGKILL the worker running the fan-in's first attempt, in the middle of it."""
    while not stop.wait(0.05):
        pid = _fan_in_first_run(url)
        if pid is None:
            continue
        for worker in supervisor.alive():
            if worker.pid == pid:
                supervisor.signal(worker, signal.SIGCONT)  # a stopped one: kill it all the same
                supervisor.signal(worker, signal.SIGKILL)
                faults.kills += 1
                faults.fan_in_killed = True
        return


def _run(url: str, directory: Path, rng: random.Random) -> tuple[Faults, dict[str, Any]]:
    """Work the enqueued graphs with :data:`WORKERS` processes under the schedule's faults
    until nothing is left to run and the faults reached their minimum."""
    faults = Faults()
    continued: list[threading.Timer] = []
    started = time.monotonic()
    stop = threading.Event()
    with Supervisor(
        url,
        url,
        directory / "logs",
        workers=WORKERS,
        concurrency=CONCURRENCY,
        lease_duration=LEASE,
        queues=(QUEUE,),
        app=APP,
        env={QUEUE_URL_ENV: url},
    ) as supervisor:
        watcher = threading.Thread(
            target=_kill_fan_in, args=(url, supervisor, faults, stop), daemon=True
        )
        watcher.start()

        def ready() -> list[Worker]:
            return [w for w in supervisor.running() if "processing" in w.log()]

        wait_until(lambda: len(ready()) == WORKERS, timeout=60, what="the workers to start")
        rounds = 0
        while _live(url) or faults.kills < MIN_KILLS or faults.stops < MIN_STOPS:
            # Real processes, faulted in real time; once the minimum is reached, less often (a
            # restart takes seconds on a loaded machine, and every fault costs a lease's wait).
            enough = faults.kills >= MIN_KILLS and faults.stops >= MIN_STOPS
            time.sleep(rng.uniform(*(LATER_PACE if enough else PACE)))
            rounds += 1
            if rounds > 400:
                raise AssertionError(f"the graphs never finished under the faults: {faults}")
            workers = ready()
            if len(workers) < 2:  # keep one working
                continue
            victim = rng.choice(workers)
            if rng.random() < 0.5:
                supervisor.signal(victim, signal.SIGKILL)
                faults.kills += 1
            else:
                # Stopped past its lease: its jobs are taken over, and it carries on (its
                # acknowledgements fenced off) when it is continued.
                supervisor.signal(victim, signal.SIGSTOP)
                faults.stops += 1
                timer = threading.Timer(
                    rng.uniform(LEASE + 0.5, LEASE + 2.0),
                    supervisor.signal,
                    (victim, signal.SIGCONT),
                )
                timer.start()
                continued.append(timer)
        stop.set()
        watcher.join()
        for timer in continued:
            timer.join()
        wait_until(lambda: _live(url) == 0, timeout=120, what="every step to finish")
    figures = {
        "kills": faults.kills,
        "stops": faults.stops,
        "restarts": supervisor.restarts,
        "worker_exits": dict(Counter(e.returncode for e in supervisor.crashes())),
        "seconds": round(time.monotonic() - started, 1),
    }
    return faults, figures


def _workflow_states(url: str, graphs: Graphs) -> dict[str, Counter[str]]:
    async def go() -> dict[str, Counter[str]]:
        found: dict[str, Counter[str]] = {}
        async with DatabaseQueue(url, registry) as queue:
            for kind, ids in graphs.workflow_ids.items():
                states: Counter[str] = Counter()
                for workflow_id in ids:
                    status = await queue.get_workflow(workflow_id, tenant_id=TENANT)
                    states[status.state if status is not None else "missing"] += 1
                found[kind] = states
        return found

    return asyncio.run(go())


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mariadb"])
def test_workflow_steps_run_and_release_exactly_once_while_workers_are_killed(
    queue_url: str, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    graphs = _enqueue(queue_url, rng)
    faults, run = _run(queue_url, tmp_path, rng)
    figures = check_workflows(queue_url, graphs.expected)
    print("workflow-figures", run, figures)
    # The faults happened and interrupted work: the fan-in among it.
    assert figures.fan_in_attempts >= 2, (figures, faults)
    assert figures.reruns > 0, figures
    assert faults.kills >= MIN_KILLS, run
    assert faults.stops >= MIN_STOPS, run
    # What the application reads agrees: every graph completed but the one a failed step
    # stopped, which is blocked.
    assert _workflow_states(queue_url, graphs) == {
        "fan": Counter({"completed": 1}),
        "diamond": Counter({"completed": DIAMONDS}),
        "continue": Counter({"blocked": 1}),
    }


def _tamper(url: str, graphs: Graphs) -> None:
    """Write into the records what a broken release path and a broken claim would leave: the
    fan-in released a second time with its counter below zero, a member completed twice, and a
    diamond's last step started before its dependencies finished."""
    fan_in = graphs.fan_in
    assert fan_in is not None
    steps = {
        step: job_id
        for step, job_id in query(
            url,
            "SELECT s.step, s.job_id FROM caravel_workflow_steps s"
            " JOIN caravel_workflows w ON w.id = s.workflow_id"
            " WHERE w.name = 'diamond' AND s.step IN ('b', 'd')",
        )
    }
    raw_fan_in = query(url, "SELECT job_id FROM caravel_workflow_steps WHERE step = 'fan-in'")
    raw_member = query(url, "SELECT job_id FROM caravel_workflow_steps WHERE step = 'fan'")
    query(
        url,
        "INSERT INTO wf_audit (source, job_id, old_waiting, new_waiting, old_released,"
        " new_released) VALUES ('update', ?, 0, -1, NULL, 1)",
        (raw_fan_in[0][0],),
    )
    query(
        url,
        "INSERT INTO wf_audit (source, job_id, old_state, new_state, old_due, new_due)"
        " VALUES ('job', ?, 'running', 'completed', 1, 1)",
        (raw_member[0][0],),
    )
    finished = query(url, "SELECT finished_at FROM caravel_jobs WHERE id = ?", (steps["b"],))
    query(
        url,
        "INSERT INTO wf_runs (job_id, step, idx, attempt, event, pid, at_ms, deps,"
        " deps_completed, deps_failed) VALUES (?, 'd', NULL, 1, 'start', 1, ?, 2, 1, 0)",
        (str(UUID(str(steps["d"]))), int(finished[0][0]) - 5),
    )


@pytest.mark.parametrize("backend", ["sqlite"])
def test_the_workflow_checker_finds_a_second_release_and_an_early_start(
    queue_url: str, tmp_path: Path
) -> None:
    """The checker's teeth: a clean run passes it, and the records a broken core would leave
    fail it, each with its rule."""
    graphs = _enqueue(queue_url, random.Random(SEED), fan_width=5, diamonds=1)
    worker = Worker(
        queue_url,
        queue_url,
        tmp_path / "worker.log",
        concurrency=4,
        lease_duration=LEASE,
        queues=(QUEUE,),
        app=APP,
        env={QUEUE_URL_ENV: queue_url},
    )
    try:
        wait_until(lambda: _live(queue_url) == 0, timeout=60, what="every step to finish")
    finally:
        assert worker.terminate() == 0, worker.log()
    check_workflows(queue_url, graphs.expected)
    _tamper(queue_url, graphs)
    with pytest.raises(WorkflowBroken) as broken:
        check_workflows(queue_url, graphs.expected)
    found = "\n".join(broken.value.problems)
    assert "fan-in" in found, found
    assert "counter went down to -1" in found, found
    assert "released_at was set 2 times" in found, found
    assert "entered completed 2 times" in found, found
    assert "1 of 2 dependencies unfinished" in found, found
    assert "before its dependency" in found, found
