"""``caravel schedules``: listing a registry's schedules with their next and last slot (or,
without ``--app``, what the database knows of them), and pausing and resuming one from the
command line, as a separate process would (the scheduler's reading of the pause is the worker
tests' business: the store is the same). Bad names exit 2 and write nothing; a schedule whose
next slot cannot be computed is named in the error."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import pytest

from caravel.store import open_store
from caravel.store.protocol import ScheduleState
from tests.support.processes import run_cli

pytestmark = pytest.mark.slow  # the console script, in subprocesses

APP = "tests.support.apps.scheduled:registry"
SLOT = int(datetime(2026, 6, 1, 0, 30, tzinfo=UTC).timestamp() * 1000)


async def _states(url: str) -> list[ScheduleState]:
    store = open_store(url)
    try:
        return await store.schedule_list()
    finally:
        await store.close()


async def _advance(url: str) -> None:
    store = open_store(url)
    try:
        await store.schedule_advance("nightly-digest", SLOT, SLOT)
    finally:
        await store.close()


def test_list_pause_and_resume(db_url: str) -> None:
    asyncio.run(_advance(db_url))
    done = run_cli("schedules", "pause", "heartbeat", "--url", db_url)
    assert (done.returncode, done.stdout.strip()) == (0, "paused schedule heartbeat")
    again = run_cli("schedules", "pause", "heartbeat", "--url", db_url)
    assert (again.returncode, again.stdout.strip()) == (0, "heartbeat was already paused")

    listed = run_cli("schedules", "list", "--url", db_url, "--app", APP, "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)["schedules"]}
    assert sorted(rows) == ["heartbeat", "nightly-digest"]
    nightly, heartbeat = rows["nightly-digest"], rows["heartbeat"]
    assert nightly["last_slot"] == "2026-06-01T00:30:00.000Z"
    assert nightly["when"] == "cron 30 2 * * * (Europe/Berlin)"
    assert (nightly["paused"], heartbeat["paused"]) == (False, True)
    assert heartbeat["last_slot"] is None
    # The next slot is in the future, on the five-minute grid.
    assert heartbeat["next_slot"] > datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    assert heartbeat["next_slot"][14:16] in {f"{m:02d}" for m in range(0, 60, 5)}

    table = run_cli("schedules", "list", "--url", db_url, "--app", APP)
    assert table.returncode == 0
    lines = [line for line in table.stdout.splitlines() if "heartbeat" in line]
    assert "paused" in lines[0]

    done = run_cli("schedules", "resume", "heartbeat", "--url", db_url)
    assert (done.returncode, done.stdout.strip()) == (0, "resumed schedule heartbeat")
    again = run_cli("schedules", "resume", "heartbeat", "--url", db_url)
    assert (again.returncode, again.stdout.strip()) == (0, "heartbeat was not paused")
    assert [s.paused_at for s in asyncio.run(_states(db_url))] == [None, None]


@pytest.mark.parametrize("action", ["pause", "resume"])
def test_a_bad_name_exits_2_and_writes_nothing(db_url: str, action: str) -> None:
    done = run_cli("schedules", action, "Bad Name", "--url", db_url)
    assert done.returncode == 2
    assert "name: must be 1 to 64 characters" in done.stderr
    assert asyncio.run(_states(db_url)) == []


def test_list_without_app_shows_what_the_database_knows(db_url: str) -> None:
    empty = run_cli("schedules", "list", "--url", db_url)
    assert empty.returncode == 0, empty.stderr
    assert empty.stdout.startswith("no schedules in the database")
    assert "--app" in empty.stdout

    asyncio.run(_advance(db_url))
    assert run_cli("schedules", "pause", "heartbeat", "--url", db_url).returncode == 0
    listed = run_cli("schedules", "list", "--url", db_url, "--json")
    assert listed.returncode == 0, listed.stderr
    heartbeat, nightly = json.loads(listed.stdout)["schedules"]
    assert nightly == {
        "name": "nightly-digest",
        "when": None,
        "queue": None,
        "last_slot": "2026-06-01T00:30:00.000Z",
        "next_slot": None,
        "paused": False,
        "paused_at": None,
    }
    assert (heartbeat["name"], heartbeat["paused"], heartbeat["last_slot"]) == (
        "heartbeat",
        True,
        None,
    )
    assert heartbeat["paused_at"] <= datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert (heartbeat["when"], heartbeat["queue"], heartbeat["next_slot"]) == (None, None, None)

    table = run_cli("schedules", "list", "--url", db_url)
    assert table.returncode == 0, table.stderr
    assert "paused" in next(line for line in table.stdout.splitlines() if "heartbeat" in line)
    assert "2026-06-01T00:30:00.000Z" in table.stdout
    assert "pass --app" in table.stdout.splitlines()[-1]


@pytest.mark.parametrize("as_json", [False, True])
def test_list_names_a_schedule_whose_next_slot_cannot_be_computed(
    db_url: str, as_json: bool
) -> None:
    app = "tests.support.apps.broken_schedule:registry"
    flags = ["--json"] if as_json else []
    done = run_cli("schedules", "list", "--url", db_url, "--app", app, *flags)
    assert (done.returncode, done.stdout) == (2, "")
    if as_json:
        error = json.loads(done.stderr)["error"]
        assert (error["type"], error["exit_code"]) == ("ScheduleError", 2)
        message = error["message"]
    else:
        message = done.stderr.strip()
    assert message.startswith("caravel schedules list: schedule never: ")
    assert "CroniterBadDateError" in message
    assert "failed to find" not in done.stderr  # croniter's own message stays out
    assert "\n" not in message
