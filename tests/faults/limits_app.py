"""The worker app of the concurrency-limit fault test
(``caravel worker --app tests.faults.limits_app:registry``): one job type partitioned by its
``key`` field, and the queue's limits declared on the registry (each worker stores them when it
starts).

Each handler run appends two records to a file of its process's own under the folder
``CARAVEL_LIMITS_RECORDS`` names (one JSON line each, written with one ``os.write`` to an
``O_APPEND`` file, so a SIGKILL leaves whole lines): ``start`` when it begins, with the lease's
expiry read from its job's row (leases are not renewed here, so that is when the job stops
counting as running if nothing finishes it), and ``end`` when it returns. :func:`check_records`
turns them into intervals and the highest concurrency seen, overall and per key.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg

from caravel import ConcurrencyLimit, JobContext, JobRegistry
from caravel.clock import SystemClock
from tests.faults.effects_app import is_sqlite, pg_dsn, sqlite_path

__all__ = ["CONCURRENCY", "PER_KEY", "QUEUE", "RECORDS_ENV", "Slot", "check_records", "registry"]

RECORDS_ENV = "CARAVEL_LIMITS_RECORDS"
QUEUE_URL_ENV = "CARAVEL_LIMITS_QUEUE_URL"
QUEUE = "limited"
CONCURRENCY = 10
PER_KEY = 2

registry = JobRegistry()
registry.limit(ConcurrencyLimit(queue=QUEUE, concurrency=CONCURRENCY, per_key=PER_KEY))

_clock = SystemClock()
_local = threading.local()
_fd: dict[int, int] = {}
_fd_lock = threading.Lock()


@dataclass(frozen=True)
class Slot:
    key: str
    n: int
    sleep: float = 0.1


def _append(record: dict[str, Any]) -> None:
    pid = os.getpid()
    with _fd_lock:
        fd = _fd.get(pid)
        if fd is None:
            path = Path(os.environ[RECORDS_ENV]) / f"{pid}.jsonl"
            fd = _fd[pid] = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(fd, (json.dumps(record) + "\n").encode())


def _lease_expiry(job_id: UUID) -> tuple[int | None, int | None]:
    """The job's lease expiry and attempt as its row holds them now."""
    url = os.environ[QUEUE_URL_ENV]
    conn = getattr(_local, "conn", None)
    if conn is None:
        if is_sqlite(url):
            conn = sqlite3.connect(sqlite_path(url), timeout=30, isolation_level=None)
        else:
            conn = psycopg.connect(pg_dsn(url), autocommit=True)
        _local.conn = conn
    sql = "SELECT lease_expires_at, attempt FROM caravel_jobs WHERE id = ?"
    if isinstance(conn, sqlite3.Connection):
        row = conn.execute(sql, (job_id.hex,)).fetchone()
    else:
        row = conn.execute(sql.replace("?", "%s"), (job_id,)).fetchone()
    return (None, None) if row is None else (row[0], row[1])


@registry.handles("tests.limits.slot.v1", Slot, partition_by="key")
def run_slot(job: Slot, ctx: JobContext[Any]) -> None:
    started = _clock.now_ms()
    expires, attempt = _lease_expiry(ctx.job_id)
    _append(
        {
            "e": "start",
            "job": str(ctx.job_id),
            "attempt": ctx.attempt,
            "key": job.key,
            "at": started,
            # Another claim took the job over already: its lease for this run is gone.
            "expires": expires if attempt == ctx.attempt else started,
        }
    )
    time.sleep(job.sleep)
    _append({"e": "end", "job": str(ctx.job_id), "attempt": ctx.attempt, "at": _clock.now_ms()})


@dataclass
class Figures:
    runs: int
    unfinished: int
    max_running: int
    max_per_key: int
    per_key: dict[str, int]


def check_records(folder: Path) -> Figures:
    """The highest number of handler runs in progress at once, overall and per key. A run is in
    progress from its start until its end, or until its lease expired if that came first (a
    run whose process was killed or stopped counts until then, and no longer)."""
    starts: dict[tuple[str, int], dict[str, Any]] = {}
    ends: dict[tuple[str, int], int] = {}
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            run = (record["job"], record["attempt"])
            if record["e"] == "start":
                starts[run] = record
            else:
                ends[run] = record["at"]
    events: list[tuple[int, int, str]] = []
    unfinished = 0
    for run, record in starts.items():
        end = min(ends.get(run, record["expires"]), record["expires"])
        unfinished += run not in ends
        if end <= record["at"]:
            continue
        events.append((record["at"], 1, record["key"]))
        events.append((end, -1, record["key"]))
    events.sort(key=lambda event: (event[0], event[1]))  # ends before starts at one moment
    running = 0
    by_key: Counter[str] = Counter()
    highest: Counter[str] = Counter()
    most = 0
    for _, change, key in events:
        running += change
        by_key[key] += change
        most = max(most, running)
        highest[key] = max(highest[key], by_key[key])
    return Figures(len(starts), unfinished, most, max(highest.values(), default=0), dict(highest))
