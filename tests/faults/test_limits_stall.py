"""A worker stopped while it holds a limited queue's limits row holds the other workers up for a
bounded time only (PostgreSQL and MariaDB).

Two ``caravel worker`` processes serve the queue of :mod:`tests.faults.limits_app` (10 running
at most, 2 per key). Worker A stops itself with SIGSTOP inside its first limited claim that took
jobs, before the commit, with the row still locked (the failpoint
``limited_claim_before_commit=stop``), and stays stopped for several times the bound. Meanwhile
the server ends A's session once it has waited
:data:`~caravel.store.limited.hold.LIMIT_HOLD_TIMEOUT` for A's next statement
(``idle_in_transaction_session_timeout`` on PostgreSQL, ``idle_transaction_timeout`` on
MariaDB), which rolls A's claim back: worker B's limited claims must go on within that bound
(plus a little for the server's timer and a busy host), and B must keep starting jobs, the ones
A had picked included, while A is stopped.

Then A gets SIGCONT: it must log the rolled-back claim in one line (no traceback), stay up and
run jobs again. In the end every job completed, each ran exactly once (A's rolled-back claim
leased nothing, so nothing it picked was lost or run twice), and the handlers' records show the
limits never exceeded."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from caravel import DatabaseQueue, DispatchOptions
from caravel.store.limited.hold import LIMIT_HOLD_TIMEOUT
from tests.faults.effects_app import is_mariadb
from tests.faults.harness import Worker, all_terminal, job_rows, query, wait_until
from tests.faults.limits_app import (
    CONCURRENCY,
    PER_KEY,
    QUEUE,
    QUEUE_URL_ENV,
    RECORDS_ENV,
    Slot,
    check_records,
    registry,
)

pytestmark = [pytest.mark.slow, pytest.mark.serial]

APP = "tests.faults.limits_app:registry"
#: How long A stays stopped at most: several times the bound, so a stall that lasted as long
#: as the stop could not pass for one within the bound.
STOPPED_FOR = 4 * LIMIT_HOLD_TIMEOUT
#: What B's claims may wait beyond the bound: the server's timer, a claim and a handler's start
#: on a busy two-core host.
SLACK = 1.5
#: Jobs of this many keys, two of each, a run taking this long: B (two slots, one job per
#: claim) is always short of work it may start, A (eight slots, four per claim) claims a batch
#: as soon as the jobs are there.
KEYS = 20
RUN_SECONDS = 0.5
ROLLED_BACK = "limited claim rolled back"


def _state(pid: int) -> str:
    """The process's state letter (``T``: stopped)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


def _enqueue(url: str, first: int, count: int) -> None:
    async def go() -> None:
        async with DatabaseQueue(url, registry) as queue:
            await queue.enqueue_many(
                [
                    (Slot(key=f"k{n % KEYS}", n=n, sleep=RUN_SECONDS), DispatchOptions(queue=QUEUE))
                    for n in range(first, first + count)
                ]
            )

    asyncio.run(go())


def _starts(records: Path) -> list[dict[str, Any]]:
    """Every handler run's start record, with the pid of the worker that ran it."""
    found = []
    for path in records.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record["e"] == "start":
                found.append({**record, "pid": int(path.stem)})
    return found


def _started_by(records: Path, pid: int, since: float) -> list[int]:
    """When the worker ``pid`` started runs, from ``since`` (ms) on, earliest first."""
    return sorted(
        start["at"] for start in _starts(records) if start["pid"] == pid and start["at"] >= since
    )


def _stalled_sessions(url: str) -> int:
    """Sessions of the queue's database idle inside a transaction (A's, while it is held; on
    MariaDB, where every session runs inside one, those holding row locks)."""
    if is_mariadb(url):
        sql = (
            "SELECT count(*) FROM information_schema.INNODB_TRX t"
            " JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id"
            " WHERE p.DB = DATABASE() AND p.COMMAND = 'Sleep' AND t.trx_rows_locked > 0"
        )
    else:
        sql = (
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND state = 'idle in transaction' AND pid <> pg_backend_pid()"
        )
    return int(query(url, sql)[0][0])


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param("postgresql", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mariadb),
    ],
)
def test_a_worker_stopped_holding_the_limits_row_holds_the_others_up_for_the_bound_only(
    db_url: str, app_url: str, tmp_path: Path
) -> None:
    records = tmp_path / "records"
    records.mkdir()
    options: dict[str, Any] = {
        "app": APP,
        "queues": (QUEUE,),
        # No lease expires in this test: every run again would be a job run twice.
        "lease_duration": 60.0,
        "env": {RECORDS_ENV: str(records), QUEUE_URL_ENV: db_url},
    }
    b = Worker(db_url, app_url, tmp_path / "b.log", concurrency=2, **options)
    a = Worker(
        db_url,
        app_url,
        tmp_path / "a.log",
        concurrency=8,
        failpoint="limited_claim_before_commit=stop",
        **options,
    )
    try:
        wait_until(lambda: "processing" in a.log() and "processing" in b.log(), 60, "workers up")
        _enqueue(db_url, 0, 2 * KEYS)

        wait_until(lambda: _state(a.pid) == "T", 30, "A stopped inside its limited claim")
        stopped_at = time.time() * 1000
        assert _stalled_sessions(db_url) == 1  # A's claim, holding the row
        # The server ends A's session within the bound, and B goes on.
        wait_until(
            lambda: _stalled_sessions(db_url) == 0,
            LIMIT_HOLD_TIMEOUT + SLACK,
            "the server to end the stopped claimer's session",
        )
        # B keeps starting jobs while A stays stopped; held up until A resumed, it would not.
        wait_until(
            lambda: len(_started_by(records, b.pid, stopped_at)) >= 5,
            STOPPED_FOR,
            "B to start five jobs while A is stopped",
        )
        assert _state(a.pid) == "T"
        first = _started_by(records, b.pid, stopped_at)[0]
        figures: dict[str, Any] = {"b_first_start_after_stop_ms": round(first - stopped_at)}
        assert first - stopped_at <= (LIMIT_HOLD_TIMEOUT + SLACK) * 1000, figures

        a.signal(signal.SIGCONT)
        wait_until(lambda: ROLLED_BACK in a.log(), 30, "A to log its rolled-back claim")
        _enqueue(db_url, 2 * KEYS, 2 * KEYS)
        wait_until(lambda: all_terminal(db_url, 4 * KEYS, QUEUE), 90, "every job to finish")
        wait_until(
            lambda: any(start["pid"] == a.pid for start in _starts(records)), 30, "A to run jobs"
        )
        assert a.poll() is None, a.log()
        assert b.poll() is None, b.log()
    finally:
        exits = {"a": a.terminate(), "b": b.terminate()}
    logs = {"a": a.log(), "b": b.log()}
    assert exits == {"a": 0, "b": 0}, logs

    # One line for the rolled-back claim, naming its queue; no traceback from either worker.
    [line] = [line for line in logs["a"].splitlines() if ROLLED_BACK in line]
    assert "WARNING" in line
    assert f"queue={QUEUE}" in line
    assert ROLLED_BACK not in logs["b"]
    assert all("Traceback" not in log for log in logs.values()), logs

    # Every job completed, at its first attempt, and ran once: A's claim leased nothing.
    rows = job_rows(db_url, QUEUE)
    assert len(rows) == 4 * KEYS
    assert {(row.state, row.attempt) for row in rows.values()} == {("completed", 1)}
    runs = Counter(start["job"] for start in _starts(records))
    assert set(runs) == set(rows)
    assert set(runs.values()) == {1}, runs

    found = check_records(records)
    figures |= {
        "a_runs": sum(start["pid"] == a.pid for start in _starts(records)),
        "max_running": found.max_running,
        "max_per_key": found.max_per_key,
    }
    print("stall-figures", figures)
    assert found.max_running <= CONCURRENCY, figures
    assert found.max_per_key <= PER_KEY, figures
