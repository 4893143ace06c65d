"""``caravel jobs cancel`` and ``caravel jobs delete`` as an operator runs them, in a subprocess
on a real database: without a terminal to ask on they refuse to act by filter unless ``--yes``,
and a refusal or a dry run changes nothing."""

from __future__ import annotations

import asyncio

import pytest

from caravel import JobState
from tests.support import Add, dispatch, open_queue
from tests.support.processes import run_cli

pytestmark = pytest.mark.slow  # the console script, in subprocesses


async def _seed(url: str) -> list[str]:
    async with open_queue(url) as queue:
        return [str((await queue.enqueue(Add(n), dispatch(queue="ops"))).job_id) for n in (1, 2)]


async def _states(url: str, ids: list[str]) -> list[JobState | None]:
    async with open_queue(url) as queue:
        found = [await queue.get_status(job_id, "ops", "tenant-a") for job_id in ids]
    return [None if status is None else status.state for status in found]


def test_by_filter_without_a_terminal_needs_yes(db_url: str) -> None:
    ids = asyncio.run(_seed(db_url))
    where = ("--url", db_url, "-q", "ops")

    refused = run_cli("jobs", "cancel", *where)

    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        "caravel jobs cancel: --yes: is required when standard input is not a terminal"
    )
    assert asyncio.run(_states(db_url, ids)) == [JobState.READY, JobState.READY]
    dry = run_cli("jobs", "cancel", *where, "--tenant", "tenant-a", "--dry-run")
    assert (dry.returncode, dry.stdout.strip()) == (
        0,
        "would cancel 2 jobs of ops (ready 2); nothing changed",
    )
    assert asyncio.run(_states(db_url, ids)) == [JobState.READY, JobState.READY]

    done = run_cli("jobs", "cancel", *where, "--type", "tests.add.v1", "--yes")

    assert (done.returncode, done.stdout.strip()) == (0, "cancelled 2 jobs of ops (ready 2)")
    assert asyncio.run(_states(db_url, ids)) == [JobState.CANCELLED, JobState.CANCELLED]
    assert run_cli("jobs", "delete", *where).returncode == 2  # the same rule for delete
    nothing = run_cli("jobs", "cancel", *where, "--yes")
    assert nothing.returncode == 1
    assert "nothing to cancel" in nothing.stderr
    gone = run_cli("jobs", "delete", *where, "--yes", "--state", "cancelled")
    assert (gone.returncode, gone.stdout.strip()) == (0, "deleted 2 jobs of ops (cancelled 2)")
    assert asyncio.run(_states(db_url, ids)) == [None, None]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("--state", "completed"), "states"),
        (("--older-than", "7 days"), "--older-than"),
        (("--type", "Bad Type"), "job_type"),
        (("6f1c8f3e-0b7e-4a43-9a2e-1a2b3c4d5e6f", "--dry-run"), "JOB_ID"),
    ],
)
def test_a_bad_filter_is_refused_naming_it(db_url: str, args: tuple[str, ...], field: str) -> None:
    ids = asyncio.run(_seed(db_url))
    done = run_cli("jobs", "cancel", "--url", db_url, "-q", "ops", "--yes", *args)
    assert done.returncode == 2
    assert f": {field}" in done.stderr
    assert asyncio.run(_states(db_url, ids)) == [JobState.READY, JobState.READY]
