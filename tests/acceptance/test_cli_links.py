"""``caravel batches`` and ``caravel chains`` as an operator runs them, in subprocesses on real
databases: batches newest first with their counts, one batch, a chain's steps with the held
ones said to be held, and ``jobs show`` naming a job's chain and batch. A malformed id exits 2
in one line naming the field; an unknown one exits 1, as ``jobs show`` does."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from caravel import BatchResult, ChainResult
from caravel.testing import ManualClock, drain
from tests.support import Add, dispatch, open_queue
from tests.support.processes import run_cli

pytestmark = pytest.mark.slow  # the console script, in subprocesses

UNKNOWN = "0190aaaa-0000-7000-8000-000000000000"


@dataclass(frozen=True)
class Made:
    older: BatchResult
    newer: BatchResult
    chain: ChainResult


async def _make(url: str) -> Made:
    clock = ManualClock(datetime.now(UTC) - timedelta(minutes=5))
    async with open_queue(url, clock=clock) as queue:
        older = await queue.enqueue_batch(
            [(Add(1), dispatch(queue="members")), (Add(2), dispatch(queue="members"))],
            callback=(Add(3), dispatch(queue="callbacks")),
        )
        await clock.advance(timedelta(seconds=1))
        newer = await queue.enqueue_batch([(Add(4), dispatch(queue="other", tenant="tenant-b"))])
        chain = await queue.enqueue_chain(
            [(Add(5), dispatch(queue="steps")), (Add(6), dispatch(queue="steps"))]
        )
        await drain(queue, queues=["members"])
    return Made(older, newer, chain)


@pytest.fixture
def made(db_url: str) -> Made:
    return asyncio.run(_make(db_url))


def test_batches_list_and_show(db_url: str, made: Made) -> None:
    done = run_cli("batches", "list", "--url", db_url, "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["batches"]
    assert [r["batch_id"] for r in rows] == [str(made.newer.batch_id), str(made.older.batch_id)]
    assert rows[1]["tenant_id"] == "tenant-a"
    assert (rows[1]["completed"], rows[1]["pending"], rows[1]["finished"]) == (2, 0, True)
    assert (rows[0]["pending"], rows[0]["finished"], rows[0]["callback_id"]) == (1, False, None)
    limited = json.loads(
        run_cli("batches", "list", "--url", db_url, "--limit", "1", "--json").stdout
    )
    assert [r["batch_id"] for r in limited["batches"]] == [str(made.newer.batch_id)]

    table = run_cli("batches", "list", "--url", db_url)
    assert table.returncode == 0
    assert str(made.older.batch_id) in table.stdout
    assert str(made.older.callback_id) in table.stdout

    shown = run_cli("batches", "show", str(made.older.batch_id), "--url", db_url)
    assert shown.returncode == 0, shown.stderr
    assert "total 2: 0 pending, 2 completed, 0 failed, 0 cancelled" in shown.stdout
    assert f"callback {made.older.callback_id}" in shown.stdout
    assert "finished at " in shown.stdout
    document = json.loads(
        run_cli("batches", "show", str(made.older.batch_id), "--url", db_url, "--json").stdout
    )
    assert document == rows[1]


def test_chains_show_says_which_steps_are_held(db_url: str, made: Made) -> None:
    first, second = (str(job_id) for job_id in made.chain.job_ids)
    done = run_cli("chains", "show", str(made.chain.chain_id), "--url", db_url, "--json")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert (found["chain_id"], found["state"], found["stopped_at_step"]) == (
        first,
        "running",
        None,
    )
    steps = [(s["step"], s["job_id"], s["queue"], s["state"]) for s in found["steps"]]
    assert steps == [(0, first, "steps", "ready"), (1, second, "steps", "held")]
    assert found["steps"][1]["job_type"] == found["steps"][0]["job_type"]

    table = run_cli("chains", "show", str(made.chain.chain_id), "--url", db_url)
    assert table.returncode == 0
    held = next(line for line in table.stdout.splitlines() if second in line)
    assert "held" in held
    assert f"Chain {first}: running" in table.stdout


def test_jobs_show_names_the_chain_and_the_batch(db_url: str, made: Made) -> None:
    second = made.chain.job_ids[1]
    where = ("--url", db_url, "-q", "steps", "-t", "tenant-a")
    step = json.loads(run_cli("jobs", "show", "--json", str(second), *where).stdout)
    assert (step["chain_id"], step["chain_step"], step["held"]) == (
        str(made.chain.chain_id),
        1,
        True,
    )
    assert step["payload"] is None
    member = made.older.job_ids[0]
    shown = run_cli(
        "jobs", "show", "--json", str(member), "--url", db_url, "-q", "members", "-t", "tenant-a"
    )
    found = json.loads(shown.stdout)
    assert (found["batch_id"], found["held"], found["chain_id"]) == (
        str(made.older.batch_id),
        False,
        None,
    )


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("batches", "show", "nope"), "batch_id"),
        (("chains", "show", "nope"), "chain_id"),
        (("batches", "list", "--limit", "0"), "--limit"),
    ],
)
def test_a_bad_id_exits_2_in_one_line(db_url: str, args: tuple[str, ...], field: str) -> None:
    done = run_cli(*args, "--url", db_url)
    assert done.returncode == 2
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"caravel {args[0]} {args[1]}: {field}: ")
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("command", "message"), [("batches", "no such batch"), ("chains", "no such chain")]
)
def test_an_unknown_id_exits_1(db_url: str, command: str, message: str) -> None:
    done = run_cli(command, "show", UNKNOWN, "--url", db_url)
    assert (done.returncode, done.stderr.strip()) == (1, f"caravel {command} show: {message}")
    as_json = run_cli(command, "show", UNKNOWN, "--url", db_url, "--json")
    assert as_json.returncode == 1
    assert json.loads(as_json.stderr)["error"]["type"] in (
        "BatchNotFoundError",
        "ChainNotFoundError",
    )


def test_no_batches(db_url: str) -> None:
    done = run_cli("batches", "list", "--url", db_url)
    assert (done.returncode, done.stdout.strip()) == (0, "no batches")
