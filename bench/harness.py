"""Runs the adapters (bench/adapters) as processes and takes readings around their work: wall
time, the CPU time of the adapters and of the database server's processes serving them, and the
CPU time everything else on the machine used meanwhile (a reading is discarded and taken again
when that was more than ``MAX_OTHER_CORES``)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from bench import node, venvs
from bench.databases import ADMIN_URL, postgres_dsn

ROOT = Path(__file__).resolve().parent.parent
ADAPTERS = ROOT / "bench" / "adapters"
TICK = os.sysconf("SC_CLK_TCK")
#: Cores' worth of CPU that other processes may use during a reading before it is discarded.
MAX_OTHER_CORES = float(os.environ.get("CARAVEL_BENCH_MAX_OTHER_CORES", "0.15"))
ATTEMPTS = 3


@dataclass(frozen=True)
class Library:
    name: str
    #: The SQL counting jobs not yet finished and acknowledged.
    unfinished: str
    #: Whether the adapter creates the schema itself (Caravel's is migrated beforehand).
    installs: bool = True
    #: The Python distribution whose installed version a report names, looked up in the
    #: interpreter the adapter runs on.
    package: str | None = None
    #: For a peer that is no Python package: what returns its version (``None`` when it cannot
    #: tell). With neither, the report names no version.
    version_of: Callable[[], str | None] | None = None

    def version(self) -> str | None:
        """The version of the library the adapter measures, or ``None`` when unknown."""
        if self.version_of is not None:
            return self.version_of()
        if self.package is None:
            return None
        python = self.command()[0]
        if python == sys.executable:
            try:
                return importlib.metadata.version(self.package)
            except importlib.metadata.PackageNotFoundError:
                return None
        lookup = f"import importlib.metadata as m; print(m.version({self.package!r}))"
        return _output([python, "-c", lookup])

    def command(self) -> list[str]:
        """The argv that runs this library's adapter, before its mode and arguments: a Python
        script, or for a Node.js peer ``node`` itself (its CPU is then the adapter process's)."""
        if self.name in node.SCRIPTS:
            return node.command_for(self.name)
        python = venvs.python_for("oban") if self.name == "oban" else sys.executable
        if python is None:
            raise RuntimeError(f"{self.name} needs Python 3.12 or newer (CARAVEL_BENCH_PYTHON312)")
        return [python, str(ADAPTERS / f"{self.name}_adapter.py")]


LIBRARIES = {
    lib.name: lib
    for lib in (
        Library(
            "caravel",
            "SELECT count(*) FROM caravel_jobs WHERE state <> 'completed'",
            False,
            package="caravel-queue",
        ),
        Library("pgqueuer", "SELECT count(*) FROM pgqueuer", package="pgqueuer"),
        Library(
            "oban", "SELECT count(*) FROM oban_jobs WHERE state <> 'completed'", package="oban"
        ),
        Library(
            "procrastinate",
            "SELECT count(*) FROM procrastinate_jobs WHERE status <> 'succeeded'",
            package="procrastinate",
        ),
        # graphile-worker deletes a job once it has completed.
        Library(
            "graphile",
            "SELECT count(*) FROM graphile_worker._private_jobs",
            version_of=lambda: node.version("graphile", "graphile-worker"),
        ),
    )
}


def _output(command: list[str]) -> str | None:
    """What ``command`` prints, stripped; ``None`` when it fails or cannot run."""
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


# ----- readings ---------------------------------------------------------------------------------


def _cpu_of(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def _busy() -> float:
    """CPU seconds the whole machine spent busy since boot (idle and iowait excluded)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = values[:8]
    return (user + nice + system + irq + softirq + steal) / TICK


def _children(pids: set[int]) -> set[int]:
    """``pids`` and all their descendants."""
    found = set(pids)
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int(
                    (entry / "stat").read_text().rsplit(")", 1)[1].split()[1]
                )
            except (FileNotFoundError, ProcessLookupError, IndexError):
                continue
    grew = True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in found and pid not in found:
                found.add(pid)
                grew = True
    return found


class Meter:
    """One reading: from :meth:`start` to :meth:`stop`."""

    def __init__(self, database: str, processes: Sequence[subprocess.Popen[str]]) -> None:
        self.database = database
        self.processes = processes
        self.admin = psycopg.connect(postgres_dsn(ADMIN_URL), autocommit=True)

    def _server_pids(self) -> set[int]:
        rows = self.admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s"
            " OR backend_type <> 'client backend' OR pid = pg_backend_pid()",
            (self.database,),
        ).fetchall()
        return {int(r[0]) for r in rows}

    def _snapshot(self) -> tuple[float, float, dict[int, float], dict[int, float]]:
        clients = _children({p.pid for p in self.processes})
        server = self._server_pids()
        return (
            time.perf_counter(),
            _busy(),
            {pid: _cpu_of(pid) for pid in clients},
            {pid: _cpu_of(pid) for pid in server},
        )

    def start(self) -> None:
        self.loadavg = Path("/proc/loadavg").read_text().split()[0]
        self.harness_cpu = time.process_time()
        self._before = self._snapshot()
        self.started = self._before[0]

    def stop(self) -> dict[str, float]:
        after = self._snapshot()
        harness = time.process_time() - self.harness_cpu
        t0, busy0, clients0, server0 = self._before
        t1, busy1, clients1, server1 = after
        clients = sum(cpu - clients0.get(pid, 0.0) for pid, cpu in clients1.items())
        server = sum(cpu - server0.get(pid, 0.0) for pid, cpu in server1.items())
        wall = t1 - t0
        others = max(0.0, (busy1 - busy0) - clients - server - harness)
        self.admin.close()
        return {
            "wall_seconds": wall,
            "client_cpu_seconds": clients,
            "server_cpu_seconds": server,
            "other_cores": others / wall if wall > 0 else 0.0,
            "loadavg_1m": float(self.loadavg),
        }


# ----- adapter processes ------------------------------------------------------------------------


class Adapter:
    """One adapter process and what it has said."""

    def __init__(self, command: list[str]) -> None:
        self.process = spawn(command)
        self.count = 0
        self.stamps: dict[int, float] = {}
        self.result: dict[str, Any] | None = None
        self.ready = False
        self._changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    @classmethod
    def start(
        cls,
        lib: Library,
        mode: str,
        dsn: str,
        jobs: int = 0,
        settings: dict[str, Any] | None = None,
    ) -> Adapter:
        """``lib``'s adapter script in ``mode``."""
        arguments = ["--dsn", dsn, "--jobs", str(jobs), "--settings", json.dumps(settings or {})]
        return cls([*lib.command(), mode, *arguments])

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            word, _, rest = line.strip().partition(" ")
            with self._changed:
                if word == "ready":
                    self.ready = True
                elif word == "count":
                    self.count = int(rest)
                elif word == "stamp":
                    n, at = rest.split()
                    self.stamps[int(n)] = float(at)
                elif word == "result":
                    self.result = json.loads(rest)
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, test: Any, timeout: float = 600.0) -> None:
        with self._changed:
            if not self._changed.wait_for(
                lambda: test(self) or self.process.poll() is not None, timeout
            ):
                raise TimeoutError(f"adapter {self.process.args[1]} timed out")
        if not test(self):
            raise RuntimeError(f"adapter {self.process.args[1:3]} ended: {self.stderr()}")

    def say(self, word: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(word + "\n")
        self.process.stdin.flush()

    def finish(self) -> None:
        self.say("exit")
        self.process.wait(timeout=120)

    def stderr(self) -> str:
        self.process.wait(timeout=30)
        assert self.process.stderr is not None
        return self.process.stderr.read()[-2000:]


def spawn(command: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        command,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{ADAPTERS}:{ROOT}:{ROOT / 'src'}"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def once(
    lib: Library,
    mode: str,
    dsn: str,
    jobs: int = 0,
    settings: dict[str, Any] | None = None,
    meter_db: str | None = None,
    also: Sequence[subprocess.Popen[str]] = (),
) -> dict[str, Any]:
    """Run one adapter's ``mode`` to its result; with ``meter_db``, the reading around it, the
    processes ``also`` counted with the adapter's own."""
    adapter = Adapter.start(lib, mode, dsn, jobs, settings)
    adapter.wait_for(lambda a: a.ready)
    meter = Meter(meter_db, [adapter.process, *also]) if meter_db else None
    if meter:
        meter.start()
    adapter.say("go")
    adapter.wait_for(lambda a: a.result is not None)
    reading = meter.stop() if meter else {}
    adapter.finish()
    assert adapter.result is not None
    return {**adapter.result, **reading}


# ----- databases --------------------------------------------------------------------------------


@contextmanager
def fresh_database(lib: Library, *, durable: bool = True) -> Iterator[tuple[str, str]]:
    """A new PostgreSQL database with ``lib``'s schema: (its DSN, its name). With
    ``durable=False`` every session on it commits with ``synchronous_commit=off``."""
    from bench.databases import database

    with database("postgresql", migrate=not lib.installs) as url:
        dsn = postgres_dsn(url)
        name = dsn.rsplit("/", 1)[1]
        if not durable:
            with psycopg.connect(postgres_dsn(ADMIN_URL), autocommit=True) as conn:
                conn.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')
        if lib.installs:
            once(lib, "install", dsn)
        yield dsn, name


def checkpoint(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        conn.execute("CHECKPOINT")


def unfinished(lib: Library, dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(lib.unfinished).fetchone()
    return int(row[0]) if row else 0
