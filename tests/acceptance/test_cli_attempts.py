"""``caravel jobs show`` prints a job's attempt timeline, as text and under ``--json``, on SQLite
and PostgreSQL: the real console script reads records a real worker wrote (a failure whose
handler marked a detail safe, then a success), from the job's own queue and tenant only."""

from __future__ import annotations

import asyncio
import os
import re
import socket
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from caravel import (
    DatabaseQueue,
    DispatchOptions,
    JobContext,
    JobFailed,
    JobRegistry,
    QueueWorker,
    WorkerOptions,
)
from caravel.testing import ManualClock
from tests.acceptance.test_cli_json import one_document
from tests.support.processes import run_cli

pytestmark = pytest.mark.slow  # the console script, in subprocesses

QUEUE = "syncs"
TENANT = "acme"
#: In the exception's message only: it must never reach a record, the table or the document.
CANARY = "token-c4n4ry"

registry = JobRegistry()


@dataclass(frozen=True)
class SyncAccount:
    account: str
    fail_times: int


#: How many times each account's handler ran (the jobs of one test run one after another).
RUNS: dict[str, int] = {}


@registry.handles("tests.sync.v1", SyncAccount)
async def sync_account(job: SyncAccount, ctx: JobContext[None]) -> None:
    RUNS[job.account] = RUNS.get(job.account, 0) + 1
    if RUNS[job.account] <= job.fail_times:
        raise JobFailed(f"refused {CANARY}", safe_detail="provider answered 503")


@dataclass(frozen=True)
class Seeded:
    timeline: str  # failed once, then completed
    waiting: str  # enqueued, never run
    trimmed: str  # failed twice, then completed, with a history of 2
    worker_id: str


async def _seed(url: str) -> Seeded:
    RUNS.clear()
    clock = ManualClock()
    where = DispatchOptions(queue=QUEUE, tenant_id=TENANT)
    async with DatabaseQueue(url, registry, clock=clock) as queue:
        timeline = await queue.enqueue(SyncAccount("a", 1), where)
        async with QueueWorker(queue) as worker:
            for _ in range(2):  # fails, then (after its 5 s backoff) completes
                assert await worker.run_once(QUEUE)
                await clock.advance(timedelta(minutes=1))
        trimmed = await queue.enqueue(SyncAccount("b", 2), where)
        async with QueueWorker(queue, options=WorkerOptions(attempt_history=2)) as short:
            for _ in range(3):
                assert await short.run_once(QUEUE)
                await clock.advance(timedelta(minutes=1))
        waiting = await queue.enqueue(SyncAccount("c", 0), where)
        return Seeded(
            str(timeline.job_id), str(waiting.job_id), str(trimmed.job_id), str(worker.worker_id)
        )


@pytest.fixture
def seeded(db_url: str) -> tuple[str, Seeded]:
    return db_url, asyncio.run(_seed(db_url))


def _show(url: str, job_id: str, *extra: str) -> Any:
    done = run_cli("jobs", "show", job_id, "--url", url, *extra)
    assert done.returncode == 0, done.stderr
    return done


def test_the_timeline_as_text(seeded: tuple[str, Seeded]) -> None:
    url, ids = seeded
    out = _show(url, ids.timeline, "-t", TENANT).stdout
    fields, _, timeline = out.partition("\nAttempts")
    assert f"job_id            {ids.timeline}" in fields.splitlines()
    assert "state             completed" in fields.splitlines()
    assert "payload" not in fields  # only with --payload
    # Cells are two or more spaces apart; a blank cell leaves no word.
    rows = [re.split(r"\s{2,}", line.strip()) for line in timeline.splitlines()]
    rows = [row for row in rows if row[0].isdigit()]
    worker = [ids.worker_id, socket.gethostname(), str(os.getpid())]
    assert rows == [
        [
            "1",
            "failed",
            "HandlerFailed",
            "caravel.directives.JobFailed",
            "provider answered 503",
            *worker,
            "2030-01-01 00:00:00",
            "2030-01-01 00:00:00",
            "0.000 s",
            "2030-01-01 00:00:05",
        ],
        ["2", "completed", *worker, "2030-01-01 00:01:00", "2030-01-01 00:01:00", "0.000 s"],
    ]
    assert "dropped (" not in out
    assert CANARY not in out


def test_the_timeline_as_json(seeded: tuple[str, Seeded]) -> None:
    url, ids = seeded
    shown = one_document(_show(url, ids.timeline, "--json"), "caravel jobs show")
    assert shown["attempts_dropped"] == 0
    common = {"worker_id": ids.worker_id, "host": socket.gethostname(), "pid": os.getpid()}
    assert shown["attempts"] == [
        {
            "attempt": 1,
            "outcome": "failed",
            "category": "HandlerFailed",
            "error_class": "caravel.directives.JobFailed",
            "detail": "provider answered 503",
            **common,
            "claimed_at": "2030-01-01T00:00:00.000Z",
            "finished_at": "2030-01-01T00:00:00.000Z",
            "duration_seconds": 0.0,
            "retry_at": "2030-01-01T00:00:05.000Z",
            "lease_token": shown["attempts"][0]["lease_token"],
        },
        {
            "attempt": 2,
            "outcome": "completed",
            "category": None,
            "error_class": None,
            "detail": None,
            **common,
            "claimed_at": "2030-01-01T00:01:00.000Z",
            "finished_at": "2030-01-01T00:01:00.000Z",
            "duration_seconds": 0.0,
            "retry_at": None,
            "lease_token": shown["attempts"][1]["lease_token"],
        },
    ]
    first, second = (a["lease_token"] for a in shown["attempts"])
    assert isinstance(first, int)
    assert second > first  # every claim has its own, and it only grows
    assert CANARY not in str(shown)


def test_a_job_with_no_attempt_yet_says_so(seeded: tuple[str, Seeded]) -> None:
    url, ids = seeded
    out = _show(url, ids.waiting).stdout
    assert out.rstrip().endswith("no attempts yet: a record is written when an attempt ends")
    assert "Attempts" not in out
    shown = one_document(_show(url, ids.waiting, "--json"), "caravel jobs show")
    assert (shown["attempts"], shown["attempts_dropped"]) == ([], 0)


def test_the_records_dropped_are_counted(seeded: tuple[str, Seeded]) -> None:
    url, ids = seeded
    shown = one_document(_show(url, ids.trimmed, "--json"), "caravel jobs show")
    assert [(a["attempt"], a["outcome"]) for a in shown["attempts"]] == [
        (2, "failed"),
        (3, "completed"),
    ]
    assert shown["attempts_dropped"] == 1
    out = _show(url, ids.trimmed).stdout
    assert out.rstrip().endswith("1 older attempt record dropped (the history's bound)")


@pytest.mark.parametrize(
    "narrowed", [("-t", "other"), ("-q", "reports"), ("-q", QUEUE, "-t", "ACME")]
)
def test_another_queue_or_tenant_shows_nothing(
    seeded: tuple[str, Seeded], narrowed: tuple[str, ...]
) -> None:
    url, ids = seeded
    for extra in ((), ("--json",)):
        done = run_cli("jobs", "show", ids.timeline, "--url", url, *narrowed, *extra)
        assert done.returncode == 1
        assert done.stdout == ""
        assert "no such job in this queue and tenant" in done.stderr
