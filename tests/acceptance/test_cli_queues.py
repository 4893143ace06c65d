"""``caravel queues``: pausing and resuming a queue from the command line, as a separate process
would, and the listing that shows it; what a worker in another process then does is the worker
tests' business (the store is the same). Bad names exit 2 and write nothing."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest

from caravel import ConcurrencyLimit, QueueInspector, RateLimit
from caravel.testing import ManualClock
from caravel.worker.leases import Leases
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


async def _limits(url: str) -> list[tuple[str, int | None, int | None]]:
    async with QueueInspector(url) as reader:
        return [(q.queue, q.concurrency, q.per_key) for q in await reader.queue_limits()]


def test_limits_set_show_replace_and_clear(db_url: str) -> None:
    empty = run_cli("queues", "limits", "show", "--url", db_url)
    assert (empty.returncode, empty.stdout.strip()) == (0, "no queue has a limit")
    done = run_cli(
        "queues", "limits", "set", "emails", "--concurrency", "10", "--per-key", "2",
        "--url", db_url,
    )  # fmt: skip
    assert (done.returncode, done.stdout.strip()) == (
        0,
        "limited emails: concurrency 10, per key 2",
    )
    shown = json.loads(run_cli("queues", "limits", "show", "--url", db_url, "--json").stdout)
    assert [(r["queue"], r["concurrency"], r["per_key"]) for r in shown["limits"]] == [
        ("emails", 10, 2)
    ]
    assert shown["limits"][0]["updated_at"].endswith("Z")
    table = run_cli("queues", "limits", "show", "--url", db_url)
    assert "emails" in table.stdout
    assert "10" in table.stdout

    # Setting again replaces the limit: the cap not given goes.
    replaced = run_cli("queues", "limits", "set", "emails", "--per-key", "3", "--url", db_url)
    assert replaced.returncode == 0
    assert asyncio.run(_limits(db_url)) == [("emails", None, 3)]

    cleared = run_cli("queues", "limits", "clear", "emails", "--url", db_url, "--json")
    assert (cleared.returncode, json.loads(cleared.stdout)) == (
        0,
        {"queue": "emails", "changed": True},
    )
    again = run_cli("queues", "limits", "clear", "emails", "--url", db_url)
    assert (again.returncode, again.stdout.strip()) == (0, "emails had no limits")
    assert asyncio.run(_limits(db_url)) == []


async def _fairness(url: str) -> list[tuple[str, bool, dict[str, int]]]:
    async with QueueInspector(url) as reader:
        return [(q.queue, q.fair, dict(q.weights)) for q in await reader.queue_limits()]


def test_fairness_is_set_shown_and_replaced(db_url: str) -> None:
    done = run_cli(
        "queues", "limits", "set", "emails", "--fair", "--weight", "acme=3",
        "--weight", "globex=2", "--url", db_url,
    )  # fmt: skip
    assert (done.returncode, done.stdout.strip()) == (
        0,
        "limited emails: fair (acme=3, globex=2)",
    )
    assert asyncio.run(_fairness(db_url)) == [("emails", True, {"acme": 3, "globex": 2})]
    table = run_cli("queues", "limits", "show", "--url", db_url)
    assert "acme=3, globex=2" in table.stdout
    # Set again without --fair: fairness and its weights go.
    assert (
        run_cli("queues", "limits", "set", "emails", "--per-key", "1", "--url", db_url).returncode
        == 0
    )
    assert asyncio.run(_fairness(db_url)) == [("emails", False, {})]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["emails", "--weight", "acme=2"], "weights"),
        (["emails", "--fair", "--weight", "acme"], "weights"),
        (["emails", "--fair", "--weight", "acme=0"], "weights"),
        (["emails", "--fair", "--weight", "acme=1001"], "weights"),
        (["emails", "--fair", "--weight", "=2"], "weights"),
        (["emails", "--fair", "--weight", "acme=2", "--weight", "acme=3"], "weights"),
        (["emails", "--concurrency", "0"], "concurrency"),
        (["emails", "--per-key", "-2"], "per_key"),
        (["emails"], "concurrency"),
        (["Not A Queue", "--concurrency", "3"], "queue"),
    ],
)
def test_a_bad_limit_exits_two_names_the_field_and_stores_nothing(
    db_url: str, args: list[str], field: str
) -> None:
    run_cli("queues", "limits", "set", "emails", "--concurrency", "4", "--url", db_url)
    done = run_cli("queues", "limits", "set", *args, "--url", db_url, "--json")
    assert done.returncode == 2
    assert done.stdout == ""
    error = json.loads(done.stderr)["error"]
    assert error["type"] == "ValidationError"
    assert f"caravel queues limits set: {field}:" in error["message"]
    assert "\n" not in error["message"]
    assert asyncio.run(_limits(db_url)) == [("emails", 4, None)]


async def _busy(url: str) -> None:
    """emails limited to 3 at once and 2 per key, fair with acme weighing 2: acme has 2 running
    and 3 ready, globex 1 running and 1 ready."""
    # The command reads at the wall clock: jobs due now, leases an hour long.
    clock = ManualClock(datetime.now(UTC))
    async with open_queue(url, clock=clock, lease_duration=timedelta(hours=1)) as q:
        for tenant, count in (("acme", 5), ("globex", 2)):
            for n in range(count):
                await q.enqueue(Add(n), dispatch(queue="emails", tenant=tenant))
        limit = ConcurrencyLimit(
            queue="emails", concurrency=3, per_key=2, fair=True, weights={"acme": 2}
        )
        await q.set_queue_limit(limit)
        assert len(await Leases(q).claim_many("emails", 10, limited=True)) == 3


def test_status_and_limits_show_what_runs_and_waits_against_each_limit(db_url: str) -> None:
    asyncio.run(_busy(db_url))
    # Three run, at the overall cap: the four ready jobs wait.
    status = run_cli("status", "--url", db_url)
    assert status.returncode == 0, status.stderr
    limits = status.stdout[status.stdout.index("Limits") :]
    (row,) = [line for line in limits.splitlines() if "emails" in line]
    assert [cell.strip() for cell in row.split("│")[1:7]] == [
        "emails", "3", "2", "acme=2", "3", "4",
    ]  # fmt: skip
    shown = json.loads(run_cli("queues", "limits", "show", "--url", db_url, "--json").stdout)
    (emails,) = shown["limits"]
    assert (emails["running"], emails["waiting"]) == (3, 4)
    assert (emails["fair"], emails["weights"]) == (True, {"acme": 2})
    assert emails["keys"] == [
        {"key": "acme", "running": 2, "waiting": 3},
        {"key": "globex", "running": 1, "waiting": 0},
    ]
    table = run_cli("queues", "limits", "show", "--url", db_url).stdout
    keys = table[table.index("Keys of emails") :]
    assert [line.split("│")[1].strip() for line in keys.splitlines() if "│" in line] == [
        "acme",
        "globex",
    ]


def test_a_bad_keys_count_exits_two_naming_it(db_url: str) -> None:
    done = run_cli("queues", "limits", "show", "--keys", "1001", "--url", db_url, "--json")
    assert done.returncode == 2
    assert done.stdout == ""
    error = json.loads(done.stderr)["error"]
    assert (error["type"], "keys:" in error["message"]) == ("ValidationError", True)


async def _rates(url: str) -> list[tuple[str, int | None, int | None, int | None, object]]:
    async with QueueInspector(url) as reader:
        return [
            (q.queue, q.concurrency, q.rate, q.rate_per_key, q.period)
            for q in await reader.queue_limits()
        ]


def test_rates_are_set_beside_concurrency_shown_and_cleared_alone(db_url: str) -> None:
    run_cli("queues", "limits", "set", "emails", "--concurrency", "4", "--url", db_url)
    done = run_cli(
        "queues", "limits", "set", "emails", "--rate", "20", "--rate-per-key", "5",
        "--period", "60", "--url", db_url,
    )  # fmt: skip
    assert (done.returncode, done.stdout.strip()) == (
        0,
        "limited emails: concurrency 4, rate 20, rate per key 5, per 60 s",
    )
    assert asyncio.run(_rates(db_url)) == [("emails", 4, 20, 5, timedelta(minutes=1))]
    table = run_cli("queues", "limits", "show", "--url", db_url)
    assert "60 s" in table.stdout
    cleared = run_cli("queues", "limits", "clear", "emails", "--only", "rate", "--url", db_url)
    assert cleared.returncode == 0
    assert asyncio.run(_rates(db_url)) == [("emails", 4, None, None, None)]


async def _rated(url: str) -> None:
    """reports: a rate of 3 per minute, no concurrency cap; 5 ready jobs, a claim starts 3."""
    clock = ManualClock(datetime.now(UTC))
    async with open_queue(url, clock=clock, lease_duration=timedelta(hours=1)) as q:
        for n in range(5):
            await q.enqueue(Add(n), dispatch(queue="reports"))
        await q.set_queue_limit(RateLimit(queue="reports", rate=3, period=timedelta(minutes=1)))
        assert len(await Leases(q).claim_many("reports", 10, limited=True)) == 3


def test_status_and_limits_show_the_rate_used_within_the_window(db_url: str) -> None:
    asyncio.run(_rated(db_url))
    status = json.loads(run_cli("status", "--url", db_url, "--json").stdout)
    (reports,) = status["queues"]
    assert reports["limits"] == {
        "concurrency": None,
        "rate": {"limit": 3, "per_key": None, "period_ms": 60_000, "used": 3},
        "fair": None,
    }
    text = run_cli("status", "--url", db_url).stdout
    limits = text[text.index("Limits") :]
    (row,) = [line for line in limits.splitlines() if "reports" in line]
    assert [cell.strip() for cell in row.split("│")[1:11]] == [
        "reports", "", "", "", "3", "0", "3", "", "3", "60 s",
    ]  # fmt: skip
    shown = json.loads(run_cli("queues", "limits", "show", "--url", db_url, "--json").stdout)
    (limit,) = shown["limits"]
    assert (limit["rate"], limit["period_ms"], limit["rate_used"]) == (3, 60_000, 3)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["emails", "--rate", "0"], "rate"),
        (["emails", "--rate", "-3"], "rate"),
        (["emails", "--rate-per-key", "0"], "per_key"),
        (["emails", "--rate", "5", "--period", "0"], "period"),
        (["emails", "--rate", "5", "--period", "86401"], "period"),
        (["emails", "--period", "5"], "rate"),
    ],
)
def test_a_bad_rate_exits_two_names_the_field_and_stores_nothing(
    db_url: str, args: list[str], field: str
) -> None:
    run_cli("queues", "limits", "set", "emails", "--rate", "7", "--url", db_url)
    done = run_cli("queues", "limits", "set", *args, "--url", db_url, "--json")
    assert done.returncode == 2
    error = json.loads(done.stderr)["error"]
    assert f"caravel queues limits set: {field}:" in error["message"]
    assert asyncio.run(_rates(db_url)) == [("emails", None, 7, None, timedelta(seconds=1))]
