"""The fault-injection harness: an application database, a client that remembers which enqueues
were acknowledged, worker processes (alone or under a supervisor that restarts them), and one
checker that judges the end state of a run.

Stable API (other suites import it):

* :func:`app_database` / :func:`create_app_database`: an app database (SQLite file or a fresh
  PostgreSQL or MariaDB database) with the ``effects`` and ``ledger`` tables.
* :class:`Client` / :func:`enqueue_effects`: enqueue :class:`Effect` jobs, recording every
  acknowledged enqueue (``client.acknowledged``) and every failed one (``client.errors``).
* :class:`Worker` / :func:`start_worker`: one ``caravel worker`` process for the effects app,
  stderr in a log file. :class:`Supervisor`: keeps K of them alive.
* :func:`check`: the invariants; returns :class:`Figures`.
* :func:`wait_until`, :func:`job_states`, :func:`all_terminal`, :func:`read_ledger`,
  :func:`read_effects`, :func:`job_rows`.

Waiting here is for real processes and real lease expiry, so it polls real time with a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg

from caravel import DatabaseQueue, DispatchOptions, QueueOptions
from tests.faults.effects_app import (
    APP_URL_ENV,
    Effect,
    SyncEffect,
    backend_of,
    create_app_schema,
    is_mariadb,
    is_sqlite,
    mariadb_connect,
    pg_dsn,
    registry,
    sqlite_path,
)
from tests.support import processes

__all__ = [
    "APP_MODULE",
    "QUEUE",
    "TENANT",
    "CheckFailed",
    "Client",
    "DidNotExit",
    "Effect",
    "Figures",
    "JobRow",
    "LedgerEvent",
    "Supervisor",
    "SyncEffect",
    "Worker",
    "all_terminal",
    "app_database",
    "check",
    "count_rejected_acks",
    "create_app_database",
    "enqueue_effects",
    "job_rows",
    "job_states",
    "query",
    "read_effects",
    "read_ledger",
    "registry",
    "start_worker",
    "wait_until",
]

ROOT = Path(__file__).resolve().parents[2]
CARAVEL = shutil.which("caravel", path=str(Path(sys.executable).parent)) or "caravel"
APP_MODULE = "tests.faults.effects_app:registry"
QUEUE = "faults"
TENANT = "tenant-f"
TERMINAL = frozenset({"completed", "dead_letter"})
REJECTED_ACK = "acknowledgement rejected"
ABANDONED = "job abandoned without acknowledgement"


# ----- waiting and plain SQL -----------------------------------------------------------------


def wait_until(
    condition: Callable[[], bool], timeout: float = 30.0, what: str = "", interval: float = 0.05
) -> None:
    """Poll ``condition`` in real time until it holds; fail after ``timeout`` seconds. The
    suite's :func:`tests.support.processes.wait_until`, every 50 ms: the conditions here read
    databases and logs."""
    processes.wait_until(condition, timeout, what, interval)


def query(url: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one read (or write) with ``?`` placeholders on SQLite, PostgreSQL or MariaDB,
    autocommit."""
    backend = backend_of(url)
    if backend == "sqlite":
        conn = sqlite3.connect(sqlite_path(url), timeout=30, isolation_level=None)
        try:
            return list(conn.execute(sql, params).fetchall())
        finally:
            conn.close()
    if backend == "mariadb":
        with mariadb_connect(url) as maria, maria.cursor() as cursor:
            cursor.execute(sql.replace("?", "%s"), params)
            return list(cursor.fetchall()) if cursor.description is not None else []
    with psycopg.connect(pg_dsn(url), autocommit=True, connect_timeout=5) as pg:
        cursor = pg.execute(sql.replace("?", "%s"), params)
        return list(cursor.fetchall()) if cursor.description is not None else []


def _uuid(value: object) -> str:
    return str(value if isinstance(value, UUID) else UUID(str(value)))


# ----- the app database ----------------------------------------------------------------------


def create_app_database(backend: str, directory: Path, *, admin_url: str | None = None) -> str:
    """A new, empty app database with the effects and ledger tables; returns its URL. On
    PostgreSQL and MariaDB it is a new database on the test server (or on ``admin_url``'s):
    drop it with :func:`drop_app_database`."""
    if backend == "sqlite":
        url = f"sqlite:///{directory / 'app.db'}"
    elif backend == "mariadb":
        from tests.support.databases import MARIADB_ADMIN_URL, create_mariadb_database

        url = create_mariadb_database(
            "caravel_faults_app", admin_url=admin_url or MARIADB_ADMIN_URL
        )
    else:
        from tests.support.databases import ADMIN_URL, create_pg_database

        url = create_pg_database("caravel_faults_app", admin_url=admin_url or ADMIN_URL)
    create_app_schema(url)
    return url


def drop_app_database(url: str) -> None:
    if is_mariadb(url):
        from tests.support.databases import drop_mariadb_database

        drop_mariadb_database(url)
    elif not is_sqlite(url):
        from tests.support.databases import drop_pg_database

        drop_pg_database(url)


@contextlib.contextmanager
def app_database(backend: str, directory: Path, *, admin_url: str | None = None) -> Iterator[str]:
    url = create_app_database(backend, directory, admin_url=admin_url)
    try:
        yield url
    finally:
        drop_app_database(url)


def clear_app_database(url: str) -> None:
    """Empty both app tables (reusing one app database across tests)."""
    if is_sqlite(url) or is_mariadb(url):
        query(url, "DELETE FROM effects")
        query(url, "DELETE FROM ledger")
    else:
        query(url, "TRUNCATE effects, ledger RESTART IDENTITY")


@dataclass(frozen=True)
class LedgerEvent:
    id: int
    job_id: str
    attempt: int
    pid: int
    event: str
    at: float


def read_ledger(app_url: str) -> list[LedgerEvent]:
    rows = query(app_url, "SELECT id, job_id, attempt, pid, event, at FROM ledger ORDER BY id")
    return [
        LedgerEvent(int(r[0]), _uuid(r[1]), int(r[2]), int(r[3]), r[4], float(r[5])) for r in rows
    ]


def read_effects(app_url: str) -> dict[str, dict[str, Any]]:
    """job id -> the effect's value (with ``tenant`` added)."""
    found: dict[str, dict[str, Any]] = {}
    for job_id, tenant, value in query(app_url, "SELECT job_id, tenant, value FROM effects"):
        found[_uuid(job_id)] = {**json.loads(value), "tenant": tenant}
    return found


# ----- the queue, read directly --------------------------------------------------------------


@dataclass(frozen=True)
class JobRow:
    id: str
    queue: str
    tenant_id: str
    job_type: str
    state: str
    attempt: int
    max_attempts: int
    last_failure: str | None
    lease_token: int


def job_rows(queue_url: str, queue: str | None = None) -> dict[str, JobRow]:
    sql = (
        "SELECT id, queue, tenant_id, job_type, state, attempt, max_attempts, last_failure,"
        " lease_token FROM caravel_jobs"
    )
    rows = query(queue_url, sql + " WHERE queue = ?", (queue,)) if queue else query(queue_url, sql)
    out: dict[str, JobRow] = {}
    for r in rows:
        row = JobRow(_uuid(r[0]), r[1], r[2], r[3], r[4], int(r[5]), int(r[6]), r[7], int(r[8]))
        out[row.id] = row
    return out


def job_states(queue_url: str, queue: str | None = None) -> Counter[str]:
    sql = "SELECT state, count(*) FROM caravel_jobs"
    if queue:
        rows = query(queue_url, sql + " WHERE queue = ? GROUP BY state", (queue,))
    else:
        rows = query(queue_url, sql + " GROUP BY state")
    return Counter({state: int(n) for state, n in rows})


def all_terminal(queue_url: str, expected: int | None = None, queue: str | None = None) -> bool:
    """Every job is completed or dead-lettered (and, with ``expected``, there are that many)."""
    states = job_states(queue_url, queue)
    total = sum(states.values())
    if expected is not None and total < expected:
        return False
    return total == states["completed"] + states["dead_letter"]


# ----- the client ----------------------------------------------------------------------------


class Client:
    """Enqueues jobs through a real :class:`DatabaseQueue`, remembering each enqueue whose call
    returned (``acknowledged``, job ids in order) and the exception type of each that raised
    (``errors``): a failed enqueue is never counted as acknowledged, even if its row was in fact
    committed. Thread-safe; :meth:`start` runs it in a background thread with its own loop."""

    def __init__(
        self,
        queue_url: str,
        *,
        queue: str = QUEUE,
        tenant: str = TENANT,
        max_attempts: int = 3,
    ) -> None:
        self.queue_url = queue_url
        self.queue = queue
        self.tenant = tenant
        self.max_attempts = max_attempts
        self.acknowledged: list[str] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def dispatch(
        self, key: str | None = None, not_before: datetime | None = None
    ) -> DispatchOptions:
        return DispatchOptions(
            queue=self.queue,
            tenant_id=self.tenant,
            idempotency_key=key,
            max_attempts=self.max_attempts,
            not_before=not_before,
        )

    async def enqueue_async(
        self, queue: DatabaseQueue, jobs: Sequence[object], keys: Sequence[str | None] | None = None
    ) -> list[str]:
        """Enqueue ``jobs`` in one transaction; record them all as acknowledged, or (if the call
        raised) none of them, and re-raise."""
        keys = keys if keys is not None else [None] * len(jobs)
        try:
            results = await queue.enqueue_many(
                [(job, self.dispatch(key)) for job, key in zip(jobs, keys, strict=True)]
            )
        except Exception as exc:
            with self._lock:
                self.errors.append(type(exc).__name__)
            raise
        ids = [str(r.job_id) for r in results]
        with self._lock:
            self.acknowledged.extend(ids)
        return ids

    def enqueue(
        self,
        jobs: Iterable[object],
        *,
        batch_size: int = 100,
        keys: Sequence[str | None] | None = None,
        keep_going: bool = False,
    ) -> list[str]:
        """Enqueue ``jobs`` in batches on a private event loop; return the ids acknowledged by
        this call. With ``keep_going`` a failed batch is recorded and skipped."""
        items = list(jobs)
        all_keys = list(keys) if keys is not None else [None] * len(items)

        async def go() -> list[str]:
            done: list[str] = []
            async with self.open() as queue:
                for start in range(0, len(items), batch_size):
                    try:
                        done += await self.enqueue_async(
                            queue,
                            items[start : start + batch_size],
                            all_keys[start : start + batch_size],
                        )
                    except Exception:
                        if not keep_going:
                            raise
            return done

        return asyncio.run(go())

    def open(self) -> DatabaseQueue:
        return DatabaseQueue(
            self.queue_url, registry, options=QueueOptions(max_attempts=self.max_attempts)
        )

    # -- in the background --

    def start(self, jobs: Iterable[object], *, pause: float = 0.0, batch_size: int = 1) -> Client:
        """Enqueue ``jobs`` from a background thread, ``batch_size`` per call, one call every
        ``pause`` seconds (a steady pace, catching up when a call was slow), carrying on after
        failures (each is recorded in ``errors``)."""
        source = iter(jobs)

        async def go() -> None:
            due = time.monotonic()
            async with self.open() as queue:
                while not self._stop.is_set():
                    batch = [job for _, job in zip(range(batch_size), source, strict=False)]
                    if not batch:
                        return
                    with contextlib.suppress(Exception):
                        await self.enqueue_async(queue, batch)
                    # A steady pace: batches are due every ``pause`` seconds from the start.
                    due += pause
                    await asyncio.sleep(max(0.0, due - time.monotonic()))  # a real pace

        self._thread = threading.Thread(target=lambda: asyncio.run(go()), daemon=True)
        self._thread.start()
        return self

    def join(self, timeout: float = 60.0) -> None:
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise AssertionError(f"the client did not finish within {timeout}s")

    def stop(self, timeout: float = 60.0) -> None:
        self._stop.set()
        self.join(timeout)


def enqueue_effects(
    queue_url: str, count: int, *, max_attempts: int = 3, **fields: Any
) -> list[str]:
    """Enqueue ``count`` :class:`Effect` jobs (``value`` 0..count-1 unless given, other fields
    as given);
    returns their ids (all acknowledged, or it raises)."""
    client = Client(queue_url, max_attempts=max_attempts)
    value = fields.pop("value", None)
    return client.enqueue(
        Effect(value=i if value is None else value, **fields) for i in range(count)
    )


# ----- worker processes ----------------------------------------------------------------------


class DidNotExit(AssertionError):
    """A worker process that did not exit when it should have (it is killed)."""


class Worker:
    """One ``caravel worker`` process for the effects app (or the registry ``app`` names, such
    as :mod:`tests.faults.schedule_app`'s); stderr goes to ``log_path``. ``prefix`` is a
    command that runs it, such as :meth:`tests.faults.netns.NetworkHost.command`'s (``ip netns
    exec <name>``, which execs it: the process id is still the worker's own)."""

    def __init__(
        self,
        queue_url: str,
        app_url: str,
        log_path: Path,
        *,
        queues: Sequence[str] = (QUEUE,),
        concurrency: int = 1,
        lease_duration: float = 1.0,
        failpoint: str | None = None,
        extra_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        app: str = APP_MODULE,
        prefix: Sequence[str] = (),
    ) -> None:
        args = [*prefix, CARAVEL, "worker", "--url", queue_url, "--app", app]
        for name in queues:
            args += ["--queue", name]
        args += [
            "--concurrency",
            str(concurrency),
            "--lease-duration",
            str(lease_duration),
            "--poll-interval",
            "0.05",
            "--shutdown-grace",
            "0",
            *extra_args,
        ]
        inherited = {k: v for k, v in os.environ.items() if k != "CARAVEL_FAILPOINT"}
        # This tree's own library (src first), not whatever copy is installed.
        path = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
        full_env = {**inherited, "PYTHONPATH": path, APP_URL_ENV: app_url, **(env or {})}
        # A worker that dies of a signal of its own (a segfault in a driver's C code, seen once
        # as exit -11 in a MariaDB soak) leaves its Python stacks in its log.
        full_env.setdefault("PYTHONFAULTHANDLER", "1")
        if failpoint:
            full_env["CARAVEL_FAILPOINT"] = failpoint
        self.log_path = log_path
        self.stopped = False  # SIGSTOPped by the test
        self.killed = False  # SIGKILLed by the test (it may take a moment to die)
        with open(log_path, "w", encoding="utf-8") as log:
            self.process = subprocess.Popen(
                args, cwd=ROOT, env=full_env, stdin=subprocess.DEVNULL, stdout=log, stderr=log
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def poll(self) -> int | None:
        return self.process.poll()

    def signal(self, signum: int) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signum)
            if signum == signal.SIGKILL:
                self.killed = True
            elif signum == signal.SIGSTOP:
                self.stopped = True
            elif signum == signal.SIGCONT:
                self.stopped = False

    def wait(self, timeout: float = 30.0) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise DidNotExit(
                f"worker {self.pid} did not exit within {timeout}s; log:\n{self.log()}"
            ) from None

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGCONT (in case it is stopped), SIGTERM, wait; SIGKILL if it does not exit."""
        if self.process.poll() is None:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
        return self.wait(timeout)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def log(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""


def start_worker(queue_url: str, app_url: str, log_path: Path, **options: Any) -> Worker:
    return Worker(queue_url, app_url, log_path, **options)


@dataclass(frozen=True)
class Exit:
    slot: int
    pid: int
    returncode: int
    at_stop: bool = False  # stopped by :meth:`Supervisor.stop` (may be -SIGTERM mid start-up)


class Supervisor:
    """Keeps ``workers`` worker processes alive, like a service manager with
    ``Restart=on-failure``: a worker that exits 1 or dies from a signal is replaced (after
    ``restart_delay``, doubling up to 1 s while it keeps failing fast). A worker that exits 0 or 2
    stays down. Use as a context manager; leaving it stops every worker (SIGCONT + SIGTERM)."""

    def __init__(
        self,
        queue_url: str,
        app_url: str,
        log_dir: Path,
        *,
        workers: int = 2,
        restart_delay: float = 0.1,
        **worker_options: Any,
    ) -> None:
        self.queue_url = queue_url
        self.app_url = app_url
        self.log_dir = log_dir
        self.count = workers
        self.restart_delay = restart_delay
        self.worker_options = worker_options
        self.slots: list[Worker] = []
        self.retired: list[Worker] = []
        self.exits: list[Exit] = []
        self.restarts = 0
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._spawned = 0
        log_dir.mkdir(parents=True, exist_ok=True)

    def _spawn(self, slot: int) -> Worker:
        self._spawned += 1
        path = self.log_dir / f"worker-{slot}-{self._spawned}.log"
        return Worker(self.queue_url, self.app_url, path, **self.worker_options)

    def start(self) -> Supervisor:
        with self._lock:
            self.slots = [self._spawn(slot) for slot in range(self.count)]
        self._thread = threading.Thread(target=self._monitor, daemon=True, name="supervisor")
        self._thread.start()
        return self

    def __enter__(self) -> Supervisor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _monitor(self) -> None:
        delays = [self.restart_delay] * self.count
        while not self._stopping.wait(0.05):
            for slot in range(self.count):
                with self._lock:
                    worker = self.slots[slot]
                    code = worker.poll()
                    if code is None:
                        continue
                    if worker in self.retired:
                        continue
                    self.exits.append(Exit(slot, worker.pid, code))
                    self.retired.append(worker)
                    if code in (0, 2):
                        continue
                # Outside the lock: wait before restarting a worker that keeps failing fast.
                if self._stopping.wait(delays[slot]):
                    return
                with self._lock:
                    self.slots[slot] = self._spawn(slot)
                    self.restarts += 1
                delays[slot] = min(1.0, delays[slot] * 2) if code == 1 else self.restart_delay

    def alive(self) -> list[Worker]:
        """Workers running right now (stopped ones included)."""
        with self._lock:
            return [w for w in self.slots if w.poll() is None]

    def running(self) -> list[Worker]:
        """Workers running and not SIGSTOPped."""
        return [w for w in self.alive() if not w.stopped]

    def signal(self, worker: Worker, signum: int) -> None:
        with self._lock:
            worker.signal(signum)

    def stop(self, timeout: float = 30.0) -> list[int]:
        """Stop supervising, then stop every worker; returns their exit codes."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            codes = []
            stuck: list[DidNotExit] = []
            for worker in self.slots:
                if worker in self.retired:
                    continue
                # A worker that died, or was sent SIGKILL, before the monitor's last look (it
                # looks every 50 ms) died while supervised: a crash, not an exit stopping caused.
                crashed = worker.killed or worker.poll() is not None
                try:
                    codes.append(worker.terminate(timeout))
                except DidNotExit as exc:  # killed: stop the others all the same
                    stuck.append(exc)
                    codes.append(worker.process.wait())
                slot = self.slots.index(worker)
                self.exits.append(Exit(slot, worker.pid, codes[-1], at_stop=not crashed))
                self.retired.append(worker)
            if stuck:
                raise stuck[0]
            return codes

    def workers_ever(self) -> list[Worker]:
        with self._lock:
            return list(dict.fromkeys([*self.retired, *self.slots]))

    def logs(self) -> str:
        """Every worker's stderr, oldest first."""
        return "\n".join(w.log() for w in self.workers_ever())

    def killed(self) -> int:
        """Workers that died from SIGKILL (sent by the test or by a poison job)."""
        return sum(1 for e in self.exits if e.returncode == -signal.SIGKILL)

    def crashes(self) -> list[Exit]:
        """Exits while supervised (not caused by :meth:`stop`)."""
        return [e for e in self.exits if not e.at_stop]


def _texts(logs: str | Iterable[str]) -> list[str]:
    return [logs] if isinstance(logs, str) else list(logs)


def count_rejected_acks(logs: str | Iterable[str]) -> int:
    """Acknowledgements the fence rejected, as the workers logged them."""
    return sum(text.count(REJECTED_ACK) for text in _texts(logs))


# ----- the checker ---------------------------------------------------------------------------


@dataclass
class Figures:
    """What a run did, for reports. ``reruns`` are executions beyond a job's first;
    ``superseded_outcomes`` are successful handler runs (``end``) of attempts that were not the
    job's last claim (their acknowledgement was rejected, lost to a crash, or never sent);
    ``abandoned`` counts handlers the workers cancelled without acknowledging (lease expired or
    lost, shutdown), from their logs;
    ``late_starts`` are starts recorded after a later attempt of the same job had started (a
    stopped worker resuming)."""

    jobs: int = 0
    acknowledged: int = 0
    completed: int = 0
    dead_letter: int = 0
    executions: int = 0
    reruns: int = 0
    rejected_acks: int = 0
    abandoned: int = 0
    max_attempt_seen: int = 0
    effects: int = 0
    handler_failures: int = 0
    superseded_outcomes: int = 0
    late_starts: int = 0
    min_claim_gap: float | None = None
    dead_by_category: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class CheckFailed(AssertionError):
    def __init__(self, problems: list[str], figures: Figures) -> None:
        self.problems = problems
        self.figures = figures
        shown = "\n  ".join(problems[:40])
        more = f"\n  ... and {len(problems) - 40} more" if len(problems) > 40 else ""
        super().__init__(
            f"{len(problems)} invariant violation(s):\n  {shown}{more}\nfigures: {figures}"
        )


def check(
    queue_url: str,
    app_url: str,
    acknowledged_ids: Iterable[str | UUID],
    *,
    expect_all_terminal: bool = True,
    logs: str | Iterable[str] = (),
    queue: str | None = None,
    strict_order: bool = True,
    lease_seconds: float | None = None,
) -> Figures:
    """Judge a finished run; raise :class:`CheckFailed` (an AssertionError) listing every
    violation, or return the figures.

    1. every acknowledged enqueue has its row;
    2. with ``expect_all_terminal``, every job is completed or dead-lettered;
    3. at most one effect per job, exactly one per completed job, none for unknown jobs;
    4. ``attempt <= max_attempts``; every ledger start is for an attempt the queue handed out
       (``1..row.attempt``) and each attempt starts at most once; with ``strict_order`` the
       attempts of a job start in increasing order (a SIGSTOPped worker resuming may record a
       late start, so stop/continue scenarios pass ``strict_order=False``); with
       ``lease_seconds`` as well, consecutive attempts of a job start at least half a lease
       apart (a job is never claimed again while its lease is current);
    5. no stale-lease write changed a row: a completed job's last claim ran to ``end``, and a job
       dead-lettered as ``HandlerFailed`` had its last attempt ``fail``; the number of rejected
       acknowledgements in ``logs`` (workers' stderr) is reported;
    6. a dead letter has ``attempt == max_attempts`` and a failure category.
    """
    problems: list[str] = []
    rows = job_rows(queue_url, queue)
    ledger = read_ledger(app_url)
    effects = read_effects(app_url)
    acknowledged = [_uuid(i) for i in acknowledged_ids]
    figures = Figures(jobs=len(rows), acknowledged=len(acknowledged))

    # (1) acknowledged enqueues exist.
    missing = [i for i in acknowledged if i not in rows]
    if missing:
        problems.append(f"(1) {len(missing)} acknowledged job(s) missing, e.g. {missing[:3]}")
    if len(set(acknowledged)) != len(acknowledged):
        dupes = [i for i, n in Counter(acknowledged).items() if n > 1]
        problems.append(f"(1) {len(dupes)} job id(s) acknowledged twice, e.g. {dupes[:3]}")

    # (2) terminal states.
    states = Counter(row.state for row in rows.values())
    figures.completed = states["completed"]
    figures.dead_letter = states["dead_letter"]
    if expect_all_terminal:
        live = [f"{r.id}={r.state}" for r in rows.values() if r.state not in TERMINAL]
        if live:
            problems.append(f"(2) {len(live)} job(s) not terminal, e.g. {live[:3]}")

    # (3) effects.
    figures.effects = len(effects)
    for job_id in effects:
        if job_id not in rows and (queue is None):
            problems.append(f"(3) effect for unknown job {job_id}")
    duplicated = query(
        app_url, "SELECT job_id, count(*) FROM effects GROUP BY job_id HAVING count(*) > 1"
    )
    for job_id, n in duplicated:
        problems.append(f"(3) job {job_id} has {n} effect rows")
    for row in rows.values():
        found = effects.get(row.id)
        if row.state == "completed" and found is None:
            problems.append(f"(3) completed job {row.id} has no effect")
        if found is not None and found["tenant"] != row.tenant_id:
            problems.append(f"(3) effect of job {row.id} has the wrong tenant")

    # (4) attempts.
    by_job: dict[str, list[LedgerEvent]] = defaultdict(list)
    for event in ledger:
        by_job[event.job_id].append(event)
    for row in rows.values():
        figures.max_attempt_seen = max(figures.max_attempt_seen, row.attempt)
        if row.attempt > row.max_attempts:
            problems.append(f"(4) job {row.id} attempt {row.attempt} > {row.max_attempts}")
    for job_id, events in by_job.items():
        row = rows.get(job_id)
        starts = [e.attempt for e in events if e.event == "start"]
        figures.executions += len(starts)
        figures.reruns += max(0, len(starts) - 1)
        figures.handler_failures += sum(1 for e in events if e.event == "fail")
        if row is None:
            if queue is None:
                problems.append(f"(4) ledger events for unknown job {job_id}")
            continue
        for attempt, n in Counter(starts).items():
            if n > 1:
                problems.append(f"(4) job {job_id} attempt {attempt} started {n} times")
        out_of_range = sorted({a for a in starts if not 1 <= a <= row.attempt})
        if out_of_range:
            problems.append(
                f"(4) job {job_id} started attempts {out_of_range}, queue handed out "
                f"1..{row.attempt} (max {row.max_attempts})"
            )
        highest = 0
        for attempt in starts:
            if attempt < highest:
                figures.late_starts += 1
                if strict_order:
                    problems.append(
                        f"(4) job {job_id} attempt {attempt} started after attempt {highest}"
                    )
            highest = max(highest, attempt)
        first_start = {e.attempt: e.at for e in reversed(events) if e.event == "start"}
        for attempt, at in first_start.items():
            previous = first_start.get(attempt - 1)
            if previous is None:
                continue
            gap = at - previous
            if figures.min_claim_gap is None or gap < figures.min_claim_gap:
                figures.min_claim_gap = round(gap, 3)
            if strict_order and lease_seconds is not None and gap < lease_seconds / 2:
                problems.append(
                    f"(4) job {job_id} attempt {attempt} started {gap:.3f}s after attempt "
                    f"{attempt - 1}, inside its {lease_seconds}s lease"
                )
        # (5) outcomes of attempts that were not the last claim.
        figures.superseded_outcomes += sum(
            1 for e in events if e.event == "end" and e.attempt < row.attempt
        )

    # (5) the final state was written by the holder of the last claim.
    for row in rows.values():
        outcomes = {(e.event, e.attempt) for e in by_job.get(row.id, [])}
        if row.state == "completed" and ("end", row.attempt) not in outcomes:
            problems.append(
                f"(5) job {row.id} completed, but its last claim (attempt {row.attempt}) "
                f"never ended: a stale lease completed it"
            )
        if (
            row.state == "dead_letter"
            and row.last_failure == "HandlerFailed"
            and ("fail", row.attempt) not in outcomes
        ):
            problems.append(
                f"(5) job {row.id} dead-lettered as HandlerFailed, but its last claim "
                f"(attempt {row.attempt}) did not fail"
            )
    texts = _texts(logs)
    figures.rejected_acks = count_rejected_acks(texts)
    figures.abandoned = sum(text.count(ABANDONED) for text in texts)

    # (6) dead letters.
    dead = Counter(
        row.last_failure or "None" for row in rows.values() if row.state == "dead_letter"
    )
    figures.dead_by_category = dict(sorted(dead.items()))
    for row in rows.values():
        if row.state != "dead_letter":
            continue
        if row.attempt != row.max_attempts:
            problems.append(
                f"(6) job {row.id} dead-lettered at attempt {row.attempt} of {row.max_attempts}"
            )
        if not row.last_failure:
            problems.append(f"(6) dead letter {row.id} has no failure category")

    if problems:
        raise CheckFailed(problems, figures)
    return figures
