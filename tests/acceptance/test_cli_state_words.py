"""The words for a job's state are the same in the API, ``caravel jobs``, ``caravel status``
and the dashboard: a job waiting out a retry's backoff is ``delayed`` everywhere (it was
``ready`` in the jobs table while the dashboard said ``delayed``), and a held chain step is
``held``, counted as held rather than delayed."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest

from caravel import ChainResult, EnqueueResult, JobStatus, Leases
from caravel.testing import ManualClock
from tests.support import Add, dispatch, open_queue, status_of
from tests.support.processes import run_cli

pytestmark = pytest.mark.slow  # the console script, in subprocesses


async def _make(url: str) -> tuple[EnqueueResult, ChainResult, JobStatus]:
    clock = ManualClock(datetime.now(UTC))
    # A backoff of five minutes: the job still waits while the commands below run.
    backoff = timedelta(minutes=5)
    async with open_queue(url, clock=clock, retry_delay=backoff, max_retry_delay=backoff) as queue:
        failing = await queue.enqueue(Add(1), dispatch(queue="words"))
        leases = Leases(queue)
        (claimed,) = await leases.claim_many("words", 1)
        outcome = await leases.fail(claimed.lease, "HandlerFailed")
        assert outcome.retry_at is not None
        chain = await queue.enqueue_chain(
            [(Add(2), dispatch(queue="words")), (Add(3), dispatch(queue="words"))]
        )
        status = await status_of(queue, failing.job_id, "words")
    return failing, chain, status


def test_a_retrying_job_is_delayed_and_a_held_step_held_in_every_listing(db_url: str) -> None:
    failing, chain, status = asyncio.run(_make(db_url))
    assert status.shown_state(datetime.now(UTC)) == "delayed"

    listed = run_cli("jobs", "list", "--url", db_url, "--queue", "words", "--json")
    assert listed.returncode == 0, listed.stderr
    shown = {row["job_id"]: row["shown_state"] for row in json.loads(listed.stdout)["jobs"]}
    assert shown == {
        str(failing.job_id): "delayed",
        str(chain.job_ids[0]): "ready",
        str(chain.job_ids[1]): "held",
    }

    table = run_cli("jobs", "list", "--url", db_url, "--queue", "words")
    assert table.returncode == 0, table.stderr
    # The table's state column, read from each job's row.
    cells = {
        cols[1]: cols[5]
        for line in table.stdout.splitlines()
        if len(cols := [c.strip() for c in line.split("│")]) > 5 and "tests.add.v1" in line
    }
    assert cells == {
        str(failing.job_id): "delayed",
        str(chain.job_ids[0]): "ready",
        str(chain.job_ids[1]): "held",
    }

    for state, expected in (("delayed", failing.job_id), ("held", chain.job_ids[1])):
        only = run_cli(
            "jobs", "list", "--url", db_url, "--queue", "words", "--state", state, "--json"
        )
        assert only.returncode == 0, only.stderr
        assert [row["job_id"] for row in json.loads(only.stdout)["jobs"]] == [str(expected)]

    status_run = run_cli("status", "--url", db_url, "--json")
    assert status_run.returncode == 0, status_run.stderr
    (counts,) = [q for q in json.loads(status_run.stdout)["queues"] if q["queue"] == "words"]
    assert (counts["ready"], counts["delayed"], counts["held"]) == (1, 1, 1)
