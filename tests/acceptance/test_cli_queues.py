"""``caravel queues``: pausing and resuming a queue from the command line, as a separate process
would, and the listing that shows it; what a worker in another process then does is the worker
tests' business (the store is the same). Bad names exit 2 and write nothing."""

from __future__ import annotations

import asyncio
import json

import pytest

from caravel import QueueInspector
from tests.support import Add, dispatch, open_queue
from tests.support.processes import run_cli

pytestmark = pytest.mark.slow  # the console script, in subprocesses


async def _paused(url: str) -> list[str]:
    async with QueueInspector(url) as reader:
        return [p.queue for p in await reader.paused_queues()]


async def _enqueue(url: str, queue: str) -> None:
    async with open_queue(url) as q:
        await q.enqueue(Add(1), dispatch(queue=queue))


def test_pause_list_and_resume(db_url: str) -> None:
    asyncio.run(_enqueue(db_url, "emails"))
    done = run_cli("queues", "pause", "reports", "--url", db_url)
    assert (done.returncode, done.stdout.strip()) == (0, "paused reports")
    again = run_cli("queues", "pause", "reports", "--url", db_url)
    assert (again.returncode, again.stdout.strip()) == (0, "reports was already paused")
    assert asyncio.run(_paused(db_url)) == ["reports"]

    listed = json.loads(run_cli("queues", "list", "--url", db_url, "--json").stdout)
    assert [(q["queue"], q["paused"]) for q in listed["queues"]] == [
        ("emails", False),
        ("reports", True),
    ]
    table = run_cli("queues", "list", "--url", db_url)
    assert table.returncode == 0
    lines = [line for line in table.stdout.splitlines() if "reports" in line or "emails" in line]
    assert "running" in lines[0]
    assert "paused" in lines[1]

    done = run_cli("queues", "resume", "reports", "--url", db_url)
    assert (done.returncode, done.stdout.strip()) == (0, "resumed reports")
    again = run_cli("queues", "resume", "reports", "--url", db_url)
    assert (again.returncode, again.stdout.strip()) == (0, "reports was not paused")
    assert asyncio.run(_paused(db_url)) == []


def test_an_empty_database_has_no_queues(db_url: str) -> None:
    done = run_cli("queues", "list", "--url", db_url)
    assert (done.returncode, done.stdout.strip()) == (0, "no queues")


@pytest.mark.parametrize("action", ["pause", "resume"])
def test_a_bad_queue_name_exits_two_and_writes_nothing(db_url: str, action: str) -> None:
    done = run_cli("queues", action, "Not A Queue", "--url", db_url, "--json")
    assert done.returncode == 2
    assert done.stdout == ""
    error = json.loads(done.stderr)["error"]
    assert error["type"] == "ValidationError"
    assert f"caravel queues {action}: queue:" in error["message"]
    assert asyncio.run(_paused(db_url)) == []
