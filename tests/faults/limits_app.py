"""The worker apps of the limit fault tests: ``tests.faults.limits_app:registry`` for the
concurrency limits, ``tests.faults.limits_app:rated_registry`` for the rate, and
``tests.faults.limits_app:combined_registry`` for both on one queue. Each has one job type
partitioned by its ``key`` field, and the queue's limits declared on the registry (each worker
stores them when it starts).

Each handler run appends two records to a file of its process's own under the folder
``CARAVEL_LIMITS_RECORDS`` names (one JSON line each, written with one ``os.write`` to an
``O_APPEND`` file, so a SIGKILL leaves whole lines): ``start`` when it begins, with the lease's
expiry read from its job's row (leases are not renewed here, so that is when the job stops
counting as running if nothing finishes it), and ``end`` when it returns. :func:`check_records`
turns them into intervals and the highest concurrency seen, overall and per key.

Under the rate, each run's ``start`` record holds its claim's time instead, read from its job's
row (``started_at``, written by the claim with the time the claim logged its start under): the
rate counts claims, not handler runs. :func:`check_rate_records` slides a window of the period
over every such start.

Under both, a run's ``start`` record holds both, and the handler does its job's one effect in
the fault suite's application database (:func:`tests.faults.effects_app.record_effect`: the
ledger's ``start`` and ``end``, and the effect written only if the job has none), so that
:func:`tests.faults.harness.check` can tell that no job was lost or ran twice with effect.

The handlers read their rows over a connection of their own to the queue database
``CARAVEL_LIMITS_QUEUE_URL`` names (inside a network namespace, through a proxy on its link).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg

from caravel import ConcurrencyLimit, JobContext, JobRegistry, RateLimit
from caravel.clock import SystemClock
from tests.faults.effects_app import (
    backend_of,
    mariadb_connect,
    pg_dsn,
    record_effect,
    record_start,
    sqlite_path,
)

__all__ = [
    "COMBINED_QUEUE",
    "CONCURRENCY",
    "PER_KEY",
    "QUEUE",
    "RATE",
    "RATED_QUEUE",
    "RATE_PERIOD",
    "RECORDS_ENV",
    "Slot",
    "check_rate_records",
    "check_records",
    "combined_registry",
    "rated_registry",
    "registry",
]

RECORDS_ENV = "CARAVEL_LIMITS_RECORDS"
QUEUE_URL_ENV = "CARAVEL_LIMITS_QUEUE_URL"
QUEUE = "limited"
CONCURRENCY = 10
PER_KEY = 2

RATED_QUEUE = "rated"
RATE = 20
RATE_PERIOD = timedelta(seconds=1)

registry = JobRegistry()
registry.limit(ConcurrencyLimit(queue=QUEUE, concurrency=CONCURRENCY, per_key=PER_KEY))
rated_registry = JobRegistry()
rated_registry.limit(RateLimit(queue=RATED_QUEUE, rate=RATE, period=RATE_PERIOD))

COMBINED_QUEUE = "limited-rated"
combined_registry = JobRegistry()
combined_registry.limit(
    ConcurrencyLimit(queue=COMBINED_QUEUE, concurrency=CONCURRENCY, per_key=PER_KEY)
)
combined_registry.limit(RateLimit(queue=COMBINED_QUEUE, rate=RATE, period=RATE_PERIOD))

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


def _row(job_id: UUID, *columns: str) -> tuple[Any, ...]:
    """The job's ``columns`` and then its attempt, as its row holds them now."""
    url = os.environ[QUEUE_URL_ENV]
    backend = backend_of(url)
    conn = getattr(_local, "conn", None)
    if conn is None:
        if backend == "sqlite":
            conn = sqlite3.connect(sqlite_path(url), timeout=30, isolation_level=None)
        elif backend == "mariadb":
            conn = mariadb_connect(url)
        else:
            conn = psycopg.connect(pg_dsn(url), autocommit=True)
        _local.conn = conn
    sql = f"SELECT {', '.join(columns)}, attempt FROM caravel_jobs WHERE id = ?"
    if isinstance(conn, sqlite3.Connection):
        row = conn.execute(sql, (job_id.hex,)).fetchone()
    elif backend == "mariadb":
        with conn.cursor() as cursor:
            cursor.execute(sql.replace("?", "%s"), (str(job_id),))
            row = cursor.fetchone()
    else:
        row = conn.execute(sql.replace("?", "%s"), (job_id,)).fetchone()
    return (None,) * (len(columns) + 1) if row is None else tuple(row)


@registry.handles("tests.limits.slot.v1", Slot, partition_by="key")
def run_slot(job: Slot, ctx: JobContext[Any]) -> None:
    started = _clock.now_ms()
    expires, attempt = _row(ctx.job_id, "lease_expires_at")
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
    time.sleep(job.sleep)  # busy for real: the run holds its slot meanwhile
    _append({"e": "end", "job": str(ctx.job_id), "attempt": ctx.attempt, "at": _clock.now_ms()})


@dataclass
class Figures:
    runs: int
    unfinished: int
    max_running: int
    max_per_key: int
    per_key: dict[str, int]
    #: The runs in progress when the highest count overall was first seen: each run's job,
    #: attempt, key, process, start, end (``None`` if it never ended) and lease expiry, so a
    #: broken limit shows which runs overlapped.
    peak: list[dict[str, Any]]


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
                starts[run] = record | {"pid": int(path.stem)}
            else:
                ends[run] = record["at"]
    events: list[tuple[int, int, tuple[str, int]]] = []
    unfinished = 0
    for run, record in starts.items():
        end = min(ends.get(run, record["expires"]), record["expires"])
        unfinished += run not in ends
        if end <= record["at"]:
            continue
        events.append((record["at"], 1, run))
        events.append((end, -1, run))
    events.sort(key=lambda event: (event[0], event[1]))  # ends before starts at one moment
    active: set[tuple[str, int]] = set()
    by_key: Counter[str] = Counter()
    highest: Counter[str] = Counter()
    peak: list[dict[str, Any]] = []
    for _, change, run in events:
        key = starts[run]["key"]
        (active.add if change > 0 else active.discard)(run)
        by_key[key] += change
        highest[key] = max(highest[key], by_key[key])
        if len(active) > len(peak):
            peak = [starts[each] | {"end": ends.get(each)} for each in sorted(active)]
    return Figures(
        len(starts), unfinished, len(peak), max(highest.values(), default=0), dict(highest), peak
    )


@rated_registry.handles("tests.limits.slot.v1", Slot, partition_by="key")
def run_rated_slot(job: Slot, ctx: JobContext[Any]) -> None:
    claimed, attempt = _row(ctx.job_id, "started_at")
    _append(
        {
            "e": "start",
            "job": str(ctx.job_id),
            "attempt": ctx.attempt,
            # Another claim took the job over already: this claim's time is gone from the row.
            "claimed": claimed if attempt == ctx.attempt else None,
        }
    )
    time.sleep(job.sleep)  # busy for real: the run holds its slot meanwhile


@dataclass
class RateFigures:
    #: Claims whose time a handler read from the job's row.
    witnessed: int
    #: The most of them within any window of the period.
    max_in_window: int


def check_rate_records(folder: Path, period_ms: int) -> RateFigures:
    """The most claims within any window ``(t - period, t]``, with ``t`` every claim's time
    (the window the store counts, ending at each start in turn). A run whose job was claimed
    again before its handler read the row, or whose worker died before its handler began, is
    not witnessed: the caller compares :attr:`RateFigures.witnessed` with the claims made."""
    claims: dict[tuple[str, int], int] = {}
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record.get("claimed") is not None:  # an ``end`` record has none
                claims[record["job"], record["attempt"]] = int(record["claimed"])
    times = sorted(claims.values())
    most = first = 0
    for last, end in enumerate(times):
        while times[first] <= end - period_ms:
            first += 1
        # Every start at ``end`` is counted: the window ends after the last of them.
        while last + 1 < len(times) and times[last + 1] == end:
            last += 1
        most = max(most, last - first + 1)
    return RateFigures(len(times), most)


@combined_registry.handles("tests.limits.slot.v1", Slot, partition_by="key")
def run_combined_slot(job: Slot, ctx: JobContext[Any]) -> None:
    started = _clock.now_ms()
    expires, claimed, attempt = _row(ctx.job_id, "lease_expires_at", "started_at")
    current = attempt == ctx.attempt  # else another claim took the job over already
    _append(
        {
            "e": "start",
            "job": str(ctx.job_id),
            "attempt": ctx.attempt,
            "key": job.key,
            "at": started,
            "expires": expires if current else started,
            "claimed": claimed if current else None,
        }
    )
    record_start(ctx)
    time.sleep(job.sleep)  # busy for real: the run holds its slot meanwhile
    record_effect(ctx, json.dumps({"n": job.n, "attempt": ctx.attempt, "pid": os.getpid()}))
    _append({"e": "end", "job": str(ctx.job_id), "attempt": ctx.attempt, "at": _clock.now_ms()})
