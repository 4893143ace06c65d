"""Duplicate enqueues racing from two processes and many threads (each thread its own
``DatabaseQueue`` and event loop) under one idempotency key, on PostgreSQL and SQLite: one row and
one id for every caller; a different payload under that key is a typed conflict naming the
original job, and writes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any
from uuid import UUID

import pytest

from tests.faults.harness import QUEUE, ROOT, TENANT, check, job_rows, query, registry

pytestmark = pytest.mark.slow

THREADS = 8
PROCESSES = 2


def race(url: str, rounds_per_process: list[list[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
    """Run one client process per entry; once all are connected, start their rounds together.
    Returns, per round, every thread's outcome."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.faults.enqueue_race",
                url,
                json.dumps(rounds),
                str(THREADS),
            ],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rounds in rounds_per_process
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
        start = time.time() + 0.5
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(f"{start}\n")
            proc.stdin.flush()
        outputs = []
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
            outputs.append(json.loads(out))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert len({o["pid"] for o in outputs}) == PROCESSES
    rounds = len(rounds_per_process[0])
    return [[item for o in outputs for item in o["results"][r]] for r in range(rounds)]


def stored_payloads(url: str, key: str) -> list[tuple[str, str]]:
    rows = query(url, "SELECT id, payload FROM caravel_jobs WHERE idempotency_key = ?", (key,))
    return [(str(UUID(str(r[0]))), r[1]) for r in rows]


def test_racing_duplicates_share_one_row_and_conflicts_write_nothing(
    db_url: str, app_url: str
) -> None:
    spec = {"queue": QUEUE, "tenant": TENANT}
    same = {**spec, "key": "order-1", "value": 1}
    # Round 1: everyone sends the same job. Round 2: everyone sends a different payload under
    # the same key. Round 3: a fresh key, process 0 sends value 10, process 1 value 20.
    rounds_per_process = [
        [
            {**same, "offset": 0.0},
            {**same, "value": 2, "offset": 1.0},
            {**spec, "key": "order-2", "value": 10 * (p + 1), "offset": 2.0},
        ]
        for p in range(PROCESSES)
    ]
    first, conflicting, mixed = race(db_url, rounds_per_process)
    callers = THREADS * PROCESSES
    # Every caller really fired at the round's start, so the calls did overlap.
    assert max(o["late"] for o in first + conflicting + mixed) < 0.5

    # Round 1: one id for every caller, exactly one of whom inserted it.
    assert len(first) == callers
    assert all("error" not in o for o in first), first
    ids = {o["job_id"] for o in first}
    assert len(ids) == 1
    (job_id,) = ids
    assert sum(1 for o in first if not o["already"]) == 1
    (stored,) = stored_payloads(db_url, "order-1")
    assert stored[0] == job_id
    entry = registry.get("faults.effect.v1")
    assert entry is not None
    assert entry.adapter.validate_json(stored[1]).value == 1

    # Round 2: all conflict, naming the original job; nothing written or changed.
    assert [o["error"] for o in conflicting] == ["IdempotencyConflictError"] * callers
    assert {o["job_id"] for o in conflicting} == {job_id}
    assert stored_payloads(db_url, "order-1") == [stored]

    # Round 3: one payload wins; its senders share its id, the others get a conflict with it.
    (winner,) = stored_payloads(db_url, "order-2")
    winning_value = entry.adapter.validate_json(winner[1]).value
    assert winning_value in (10, 20)
    winner_process = 0 if winning_value == 10 else 1
    by_process = [mixed[:THREADS], mixed[THREADS:]]
    winners, losers = by_process[winner_process], by_process[1 - winner_process]
    assert all("error" not in o for o in winners), winners
    winner_id = winner[0]
    assert {o["job_id"] for o in winners} == {winner_id}
    assert sum(1 for o in winners if not o["already"]) == 1
    assert [o["error"] for o in losers] == ["IdempotencyConflictError"] * THREADS
    assert {o["job_id"] for o in losers} == {winner_id}

    # Exactly two rows in the queue, and both acknowledged ids exist.
    rows = job_rows(db_url)
    assert len(rows) == 2
    figures = check(db_url, app_url, [job_id, winner_id], expect_all_terminal=False)
    assert figures.jobs == 2
