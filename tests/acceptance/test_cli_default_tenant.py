"""``caravel jobs show`` and ``caravel jobs replay`` without ``--tenant`` look in the default
tenant, exactly: the real console script against a real SQLite file and PostgreSQL database."""

from __future__ import annotations

import asyncio

import pytest

from caravel import DEFAULT_TENANT, DispatchOptions, JobState, Leases
from tests.support import Add, open_queue
from tests.support.processes import run_cli

pytestmark = pytest.mark.slow  # the console script in a subprocess

QUEUE = "single"


async def _seed(url: str) -> tuple[str, str]:
    """A completed job and a dead letter, both enqueued without a tenant."""
    async with open_queue(url, max_attempts=1) as queue:
        done = await queue.enqueue(Add(1), DispatchOptions(queue=QUEUE))
        dead = await queue.enqueue(Add(2), DispatchOptions(queue=QUEUE))
        leases = Leases(queue)
        first = await leases.claim(QUEUE)
        assert first is not None
        assert first.job_id == done.job_id
        second = await leases.claim(QUEUE)
        assert second is not None
        assert second.job_id == dead.job_id
        await leases.fail(second.lease, "HandlerFailed")
        await leases.complete(first.lease)
    return str(done.job_id), str(dead.job_id)


def _state(url: str, job_id: str) -> JobState | None:
    async def read() -> JobState | None:
        async with open_queue(url) as queue:
            status = await queue.get_status(job_id, QUEUE)
            return None if status is None else status.state

    return asyncio.run(read())


def test_show_and_replay_without_tenant_use_the_default_tenant(db_url: str) -> None:
    done_id, dead_id = asyncio.run(_seed(db_url))

    shown = run_cli("jobs", "show", done_id, "--url", db_url, "-q", QUEUE)
    assert shown.returncode == 0, shown.stderr
    assert done_id in shown.stdout
    assert DEFAULT_TENANT in shown.stdout
    same = run_cli("jobs", "show", done_id, "--url", db_url, "-q", QUEUE, "-t", DEFAULT_TENANT)
    assert same.returncode == 0, same.stderr
    assert same.stdout == shown.stdout

    # Exact matching: another tenant does not see it, and cannot replay it.
    other = run_cli("jobs", "show", done_id, "--url", db_url, "-q", QUEUE, "-t", "other")
    assert other.returncode == 1
    assert other.stdout == ""
    refused = run_cli("jobs", "replay", dead_id, "--url", db_url, "-q", QUEUE, "-t", "other")
    assert refused.returncode == 1
    assert _state(db_url, dead_id) is JobState.DEAD_LETTER

    replayed = run_cli("jobs", "replay", dead_id, "--url", db_url, "-q", QUEUE)
    assert replayed.returncode == 0, replayed.stderr
    assert _state(db_url, dead_id) is JobState.READY


def test_an_explicit_empty_tenant_is_still_refused(db_url: str) -> None:
    done_id, _ = asyncio.run(_seed(db_url))
    for command in ("show", "replay"):
        done = run_cli("jobs", command, done_id, "--url", db_url, "-q", QUEUE, "-t", "")
        assert done.returncode != 0
        assert "tenant_id" in done.stderr
        assert "Traceback" not in done.stderr
