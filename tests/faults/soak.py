"""The soak: a seeded random schedule of faults over several worker processes while a client
keeps enqueueing, then the checker over everything.

    python -m tests.faults.soak --duration 600 --seed 7 --backend postgresql   # or sqlite, mariadb
    python -m tests.faults.soak --duration 120 --scenario limits,rate,combined # flow control only

Four scenarios, each for ``duration`` seconds of faults on each backend, on databases of its
own. ``effects``: a client enqueues a mix of jobs (10% of handler runs fail at random, some
sleep past a lease renewal, some hold a worker thread with a CPU loop) while the schedule
SIGKILLs workers (a supervisor restarts them) and SIGSTOPs others for up to 2.5 s before
SIGCONT; on PostgreSQL and MariaDB the workers reach the server through a TCP proxy and the
schedule also resets every open connection at once. Then the faults stop, every job is waited
for, and :func:`tests.faults.harness.check` judges the run. ``limits``, ``rate`` and
``combined``: the fault suite's flow-control scenarios (:mod:`tests.faults.limits_scenarios`:
a queue with concurrency limits, a queue with a rate, a queue with both whose four workers run
on two network hosts on PostgreSQL and MariaDB, which needs network namespaces), kept fed for
the duration, with connection resets through the proxies on PostgreSQL and MariaDB, judged by
the same checks over the handlers' own records. Prints one JSON object per scenario and backend:
the checker's figures plus what the schedule did. The same :func:`run_soak` is the short CI
profile in ``test_soak.py``.

The databases are new ones on the test servers (``tests.support.databases``), except MariaDB's,
which live on a throwaway server of the soak's own (:mod:`tests.faults.mariaserver`): four
workers with pools of up to 40 connections each, plus their handlers', would otherwise compete
for the shared server's 151 connections with whatever else runs on the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.faults.effects_app import is_sqlite
from tests.faults.harness import (
    Client,
    Effect,
    Supervisor,
    SyncEffect,
    app_database,
    check,
    job_rows,
    job_states,
)
from tests.faults.limits_scenarios import CHECKS, SCENARIOS, run_scenario, second_host
from tests.faults.mariaserver import PrivateMariadb
from tests.faults.proxy import FaultProxy

BACKENDS = ("sqlite", "postgresql", "mariadb")
LEASE = 1.0
RENEWAL = 0.3
FAIL_PROBABILITY = 0.1


@dataclass
class Profile:
    duration: float = 60.0
    seed: int = 1
    workers: int = 3
    concurrency: int = 4
    rate: float = 60.0  # jobs per second offered by the client
    stall_timeout: float = 60.0  # the drain fails when no job finishes for this long
    #: Keep the faults coming past ``duration`` (for at most as long again) until each kind
    #: (kill, stop and, through a proxy, reset) happened this many times.
    at_least: int = 0


@dataclass
class Schedule:
    kills: int = 0
    stops: int = 0
    resets: int = 0
    actions: list[tuple[float, str, int]] = field(default_factory=list)


def job_stream(seed: int) -> Iterator[Effect]:
    """The seeded job mix: mostly quick jobs, some sleeping past a renewal, a few long ones
    (kept alive by renewal), some synchronous CPU work; every run may fail at 10%."""
    rng = random.Random(f"jobs:{seed}")
    for value in itertools.count():
        roll = rng.random()
        if roll < 0.05:
            yield SyncEffect(value=value, cpu=0.02, fail_probability=FAIL_PROBABILITY, seed=seed)
            continue
        sleep = rng.choices([0.0, 0.01, 0.05, 0.4, 1.5], weights=[50, 25, 15, 8, 2])[0]
        yield Effect(value=value, sleep=sleep, fail_probability=FAIL_PROBABILITY, seed=seed)


def run_soak(
    queue_url: str,
    app_url: str,
    log_dir: Path,
    profile: Profile,
    progress: Callable[[float, Counter[str] | None], None] | None = None,
) -> tuple[dict[str, Any], Supervisor, Client]:
    """Run one soak against migrated, empty databases; return the report (the checker's
    figures and the schedule's), the supervisor and the client. Raises the checker's
    AssertionError when an invariant broke."""
    rng = random.Random(f"faults:{profile.seed}")
    schedule = Schedule()
    client = Client(queue_url, max_attempts=3)
    with contextlib.ExitStack() as stack:
        proxy = None
        if not is_sqlite(queue_url):
            proxy = stack.enter_context(FaultProxy.to(queue_url))
        report, supervisor = _run(
            queue_url, app_url, log_dir, profile, progress, rng, schedule, client, proxy
        )
    return report, supervisor, client


def run_flow_soak(
    name: str,
    queue_url: str,
    app_url: str,
    directory: Path,
    profile: Profile,
    progress: Callable[[float, Counter[str] | None], None] | None = None,
) -> dict[str, Any]:
    """Run the flow-control scenario ``name`` (``limits``, ``rate`` or ``combined``) of
    :mod:`tests.faults.limits_scenarios` for ``profile.duration`` seconds against migrated,
    empty databases, through a proxy that resets connections on PostgreSQL and MariaDB (and
    for ``combined``, half the workers on a second network host); return its checker's figures.
    Raises the checker's AssertionError when a limit broke or a job was lost, RuntimeError when
    the second host cannot be made."""
    rng = random.Random(f"{name}:{profile.seed}")
    scenario = SCENARIOS[name]
    with contextlib.ExitStack() as stack:
        proxy = None
        if not is_sqlite(queue_url):
            proxy = stack.enter_context(FaultProxy.to(queue_url))
        host = stack.enter_context(second_host(scenario, queue_url))
        run = run_scenario(
            scenario,
            queue_url,
            app_url,
            directory,
            rng,
            duration=profile.duration,
            proxy=proxy,
            host=host,
            progress=progress,
        )
    return {"seed": profile.seed, "duration_s": profile.duration, **CHECKS[name](run)}


def _run(
    queue_url: str,
    app_url: str,
    log_dir: Path,
    profile: Profile,
    progress: Callable[[float, Counter[str] | None], None] | None,
    rng: random.Random,
    schedule: Schedule,
    client: Client,
    proxy: FaultProxy | None,
) -> tuple[dict[str, Any], Supervisor]:
    supervisor = Supervisor(
        proxy.url(queue_url) if proxy is not None else queue_url,
        app_url,
        log_dir,
        workers=profile.workers,
        concurrency=profile.concurrency,
        lease_duration=LEASE,
        extra_args=("--lease-renewal-interval", str(RENEWAL)),
    )
    batch = 10
    started = time.monotonic()
    with supervisor:
        client.start(job_stream(profile.seed), pause=batch / profile.rate, batch_size=batch)
        deadline = started + profile.duration

        def more_faults(now: float) -> bool:
            if now < deadline:
                return True
            kinds = [schedule.kills, schedule.stops]
            kinds += [schedule.resets] if proxy is not None else []
            return now < deadline + profile.duration and min(kinds) < profile.at_least

        resume: dict[int, tuple[float, Any]] = {}
        deck: list[str] = []
        next_action = started + rng.uniform(0.5, 2.0)
        while more_faults(time.monotonic()):
            now = time.monotonic()
            for pid, (at, worker) in list(resume.items()):
                if now >= at:
                    supervisor.signal(worker, signal.SIGCONT)
                    del resume[pid]
            if now >= next_action:
                next_action = now + rng.uniform(0.5, 2.0)
                if not deck:  # two kills, two stops, one pause (and one reset through a proxy)
                    deck = ["kill", "kill", "stop", "stop", "none"]
                    deck += ["reset"] if proxy is not None else []
                    rng.shuffle(deck)
                action = deck.pop()
                if action == "reset" and proxy is not None:
                    severed = proxy.reset_all()
                    schedule.resets += 1
                    schedule.actions.append((round(now - started, 3), action, severed))
                    continue
                candidates = [w for w in supervisor.running() if "processing" in w.log()]
                if action != "none" and not candidates:
                    # Every worker is restarting (after a reset, say): try again shortly, so the
                    # run always gets the kills and pauses its deck promised.
                    deck.append(action)
                    next_action = now + 0.2
                    continue
                if action != "none":
                    victim = rng.choice(candidates)
                    if action == "kill":
                        supervisor.signal(victim, signal.SIGKILL)
                        schedule.kills += 1
                    else:
                        supervisor.signal(victim, signal.SIGSTOP)
                        resume[victim.pid] = (now + rng.uniform(0.3, 2.5), victim)
                        schedule.stops += 1
                    schedule.actions.append((round(now - started, 3), action, victim.pid))
            if progress is not None:
                progress(now - started, None)
            time.sleep(0.02)  # the schedule's tick: real processes, faulted in real time
        for _, worker in resume.values():
            supervisor.signal(worker, signal.SIGCONT)
        client.stop()
        chaos_seconds = time.monotonic() - started
        # Drain: wait while jobs keep finishing; give up after a minute without progress.
        stall = profile.stall_timeout
        finished, progress_at = -1, time.monotonic()
        while True:
            states = job_states(queue_url)
            if sum(states.values()) == states["completed"] + states["dead_letter"]:
                break
            done = states["completed"] + states["dead_letter"]
            if done != finished:
                finished, progress_at = done, time.monotonic()
            elif time.monotonic() - progress_at > stall:
                raise AssertionError(f"no job finished for {stall}s while draining: {states}")
            if progress is not None:
                progress(time.monotonic() - started, states)
            time.sleep(0.5)  # polling the real database while real workers drain it
        elapsed = time.monotonic() - started
    figures = check(
        queue_url,
        app_url,
        client.acknowledged,
        logs=supervisor.logs(),
        strict_order=False,  # a SIGSTOPped worker may record a start late
    )
    crashes = supervisor.crashes()
    report: dict[str, Any] = {
        "seed": profile.seed,
        "duration_s": profile.duration,
        "workers": profile.workers,
        "concurrency": profile.concurrency,
        **figures.as_dict(),
        "enqueue_errors": len(client.errors),
        "kills": schedule.kills,
        "stops": schedule.stops,
        "resets": schedule.resets,
        "restarts": supervisor.restarts,
        "worker_exits": dict(sorted(_count(c.returncode for c in crashes).items())),
        "chaos_s": round(chaos_seconds, 1),
        "total_s": round(elapsed, 1),
        "last_failures_of_completed": _count(
            row.last_failure or "None"
            for row in job_rows(queue_url).values()
            if row.state == "completed"
        ),
    }
    return report, supervisor


def _count(values: Any) -> dict[Any, int]:
    found: dict[Any, int] = {}
    for value in values:
        found[value] = found.get(value, 0) + 1
    return found


@contextlib.contextmanager
def databases(backend: str, directory: Path) -> Iterator[tuple[str, str]]:
    """A migrated, empty queue database and an app database of ``backend`` (on MariaDB, on a
    private server started for them and removed afterwards)."""
    from tests.support.databases import pg_database, sqlite_url

    if backend == "sqlite":
        from caravel import migrate

        queue_url = sqlite_url(directory / "queue.db")
        migrate.upgrade(queue_url)
        with app_database("sqlite", directory) as app_url:
            yield queue_url, app_url
        return
    if backend == "mariadb":
        server = PrivateMariadb.create()
        try:
            with (
                server.database(migrated=True) as queue_url,
                app_database("mariadb", directory, admin_url=server.admin_url) as app_url,
            ):
                yield queue_url, app_url
        finally:
            server.destroy()
        return
    with pg_database(migrated=True) as queue_url, app_database("postgresql", directory) as app_url:
        yield queue_url, app_url


class Progress:
    """Prints the job states to stderr every 30 s, so a long soak shows it is moving."""

    def __init__(self, queue_url: str, every: float = 30.0) -> None:
        self.queue_url = queue_url
        self.every = every
        self.next = every

    def __call__(self, elapsed: float, states: Counter[str] | None) -> None:
        if elapsed < self.next:
            return
        self.next = elapsed + self.every
        states = states if states is not None else job_states(self.queue_url)
        print(f"[{elapsed:6.0f}s] {dict(sorted(states.items()))}", file=sys.stderr, flush=True)


SOAK_SCENARIOS = ("effects", *SCENARIOS)


def _scenarios(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = sorted(set(names) - set(SOAK_SCENARIOS))
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"choose from {', '.join(SOAK_SCENARIOS)} (comma-separated), not {text!r}"
        )
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.faults.soak",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--duration", type=float, default=600.0, help="seconds of faults per scenario"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--backend",
        choices=[*BACKENDS, "both", "all"],
        default="all",
        help="one database; both: sqlite and postgresql; all: every one (the default)",
    )
    parser.add_argument(
        "--scenario",
        type=_scenarios,
        default=list(SOAK_SCENARIOS),
        help=f"comma-separated, of {', '.join(SOAK_SCENARIOS)} (default: all)",
    )
    parser.add_argument("--workers", type=int, default=3, help="effects scenario")
    parser.add_argument("--concurrency", type=int, default=4, help="effects scenario")
    parser.add_argument(
        "--rate", type=float, default=40.0, help="jobs enqueued per second (effects scenario)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the logs directory")
    args = parser.parse_args(argv)
    backends = {"both": ["sqlite", "postgresql"], "all": list(BACKENDS)}.get(
        args.backend, [args.backend]
    )
    profile = Profile(
        duration=args.duration,
        seed=args.seed,
        workers=args.workers,
        concurrency=args.concurrency,
        rate=args.rate,
    )
    failed = False
    for scenario in args.scenario:
        for backend in backends:
            ok = _soak_one(scenario, backend, profile, keep=args.keep)
            failed = failed or not ok
    return 1 if failed else 0


def _soak_one(scenario: str, backend: str, profile: Profile, *, keep: bool) -> bool:
    """Soak one scenario on one backend's fresh databases; print its JSON line; whether it
    passed. The logs (and the flow scenarios' records) are kept when it failed."""
    directory = Path(tempfile.mkdtemp(prefix=f"caravel-soak-{scenario}-{backend}-"))
    ok = True
    with databases(backend, directory) as (queue_url, app_url):
        try:
            if scenario == "effects":
                report, _, _ = run_soak(
                    queue_url, app_url, directory / "logs", profile, Progress(queue_url)
                )
            else:
                report = run_flow_soak(
                    scenario, queue_url, app_url, directory, profile, Progress(queue_url)
                )
            report = {"scenario": scenario, "backend": backend, "ok": True, **report}
        except (AssertionError, RuntimeError) as exc:  # a check failed, or no second host
            ok = False
            report = {"scenario": scenario, "backend": backend, "ok": False, "error": str(exc)}
    report["logs"] = str(directory) if keep or not ok else None
    print(json.dumps(report), flush=True)
    if not (keep or not ok):
        shutil.rmtree(directory, ignore_errors=True)
    return ok


if __name__ == "__main__":
    sys.exit(main())
