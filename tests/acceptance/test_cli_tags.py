"""Tags on the command line: ``jobs list --tag`` (JSON and the table), ``jobs show``, a bad
``--tag`` refused, and ``jobs replay-dead --tag`` replaying only the tagged dead letters."""

from __future__ import annotations

import asyncio
import json
import subprocess
from datetime import UTC, datetime, timedelta

import pytest

from caravel import Leases
from caravel.testing import ManualClock
from tests.support import Add, dispatch, open_queue
from tests.support.processes import run_cli

pytestmark = pytest.mark.slow  # the console script, in subprocesses


def ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, (done.stdout, done.stderr)
    return done


def seed(url: str) -> dict[str, str]:
    """Three jobs in queue ``emails``: two tagged, one not; and two dead letters, one tagged."""

    async def go() -> dict[str, str]:
        ids: dict[str, str] = {}
        clock = ManualClock(datetime.now(UTC) - timedelta(days=1))
        async with open_queue(url, clock=clock) as q:
            for label, tags in (("dead_tagged", ("incident:7",)), ("dead_plain", ())):
                result = await q.enqueue(Add(0), dispatch(queue="dead", tags=tags, max_attempts=1))
                ids[label] = str(result.job_id)
                claimed = await Leases(q).claim("dead")
                assert claimed is not None
                await Leases(q).fail(claimed.lease, "HandlerFailed")
                await clock.advance(timedelta(seconds=1))
            for label, tags in (
                ("billing", ("billing", "customer:42")),
                ("billing_eu", ("billing-eu",)),
                ("plain", ()),
            ):
                result = await q.enqueue(Add(1), dispatch(queue="emails", tags=tags))
                ids[label] = str(result.job_id)
                await clock.advance(timedelta(seconds=1))
        return ids

    return asyncio.run(go())


def test_jobs_list_filters_by_an_exact_tag_and_shows_tags(db_url: str) -> None:
    ids = seed(db_url)

    def listed(*args: str) -> list[dict[str, object]]:
        done = ok(run_cli("jobs", "list", "--url", db_url, "--json", *args))
        rows: list[dict[str, object]] = json.loads(done.stdout)["jobs"]
        return rows

    (row,) = listed("--tag", "billing")
    assert (row["job_id"], row["tags"]) == (ids["billing"], ["billing", "customer:42"])
    assert [r["job_id"] for r in listed("--tag", "customer:42", "--queue", "emails")] == [
        ids["billing"]
    ]
    assert listed("--tag", "bill") == []
    by_id = {r["job_id"]: r["tags"] for r in listed()}
    assert by_id[ids["plain"]] == []

    table = ok(run_cli("jobs", "list", "--url", db_url, "--queue", "emails")).stdout
    (line,) = [ln for ln in table.splitlines() if ids["billing"] in ln]
    assert "billing, customer:42" in line

    shown = json.loads(
        ok(
            run_cli(
                "jobs",
                "show",
                "--json",
                ids["billing"],
                "--url",
                db_url,
                "-q",
                "emails",
                "-t",
                "tenant-a",
            )
        ).stdout
    )
    assert shown["tags"] == ["billing", "customer:42"]


def test_a_bad_tag_is_refused_naming_the_option(db_url: str) -> None:
    done = run_cli("jobs", "list", "--url", db_url, "--json", "--tag", "Billing")
    assert done.returncode == 2
    assert done.stdout == ""
    error = json.loads(done.stderr)["error"]
    assert error["type"] == "ValidationError"
    assert error["message"].startswith("caravel jobs list: --tag: must be 1 to 64 characters")


def test_replay_dead_with_a_tag_replays_only_the_tagged_dead_letters(db_url: str) -> None:
    ids = seed(db_url)
    done = ok(run_cli("jobs", "replay-dead", "--url", db_url, "--yes", "--tag", "incident:7"))
    assert "replayed 1 of 1" in done.stdout
    states = {
        r["job_id"]: r["state"]
        for r in json.loads(ok(run_cli("jobs", "list", "--url", db_url, "--json")).stdout)["jobs"]
    }
    assert states[ids["dead_tagged"]] == "ready"
    assert states[ids["dead_plain"]] == "dead_letter"
