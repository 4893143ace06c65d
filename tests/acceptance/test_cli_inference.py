"""What the command line works out for itself (docs/reference/cli.md): ``caravel worker``
without ``--queue`` serves the queues its registry names, and ``caravel jobs show`` and
``caravel jobs replay`` find a job by its id alone. The real console script, on a real SQLite
file and a real PostgreSQL database."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from caravel import DispatchOptions, JobState, Leases, QueueInspector
from caravel.testing import ManualClock
from tests.support import Add, dispatch, open_queue
from tests.support.apps.declared_queues import Echo
from tests.support.apps.declared_queues import registry as declared
from tests.support.processes import WorkerProcess, run_cli, wait_until

pytestmark = pytest.mark.slow  # the console script, in subprocesses

DECLARED = "tests.support.apps.declared_queues:registry"


# ----- caravel worker without --queue ------------------------------------------------------


async def _enqueue_echoes(url: str, queues: list[str]) -> dict[str, str]:
    # Due now by the worker's real clock.
    clock = ManualClock(datetime.now(UTC) - timedelta(seconds=1))
    async with open_queue(url, declared, clock=clock) as queue:
        return {
            name: str((await queue.enqueue(Echo(name), DispatchOptions(queue=name))).job_id)
            for name in queues
        }


async def _states(url: str) -> dict[str, JobState]:
    async with QueueInspector(url) as reader:
        return {job.queue: job.state for job in await reader.list_jobs()}


def test_a_worker_without_queue_serves_every_queue_its_registry_names(
    db_url: str, tmp_path: Path
) -> None:
    asyncio.run(_enqueue_echoes(db_url, ["alpha", "beta", "gamma", "delta"]))
    worker = WorkerProcess(db_url, tmp_path, [], "--no-schedules", app=DECLARED)
    try:

        def served() -> bool:
            states = asyncio.run(_states(db_url))
            return all(states[name] is JobState.COMPLETED for name in ("alpha", "beta", "gamma"))

        wait_until(served, what="the registry's three queues to be served")
        worker.signal()
        code, err = worker.wait()
    finally:
        worker.kill()
    assert code == 0, err
    # alpha and beta are declared; gamma is its schedule's queue; delta is named by nothing.
    assert asyncio.run(_states(db_url))["delta"] is JobState.READY
    first = err.splitlines()[0]
    assert first.startswith(
        "caravel worker: processing alpha, beta, gamma (the registry's queues; concurrency 1)"
    ), err


def test_a_worker_given_queues_serves_only_those(db_url: str, tmp_path: Path) -> None:
    asyncio.run(_enqueue_echoes(db_url, ["alpha", "delta"]))
    worker = WorkerProcess(db_url, tmp_path, ["delta"], "--no-schedules", app=DECLARED)
    try:
        wait_until(
            lambda: asyncio.run(_states(db_url))["delta"] is JobState.COMPLETED,
            what="delta to be served",
        )
        worker.signal()
        code, err = worker.wait()
    finally:
        worker.kill()
    assert code == 0, err
    assert asyncio.run(_states(db_url))["alpha"] is JobState.READY
    assert "caravel worker: processing delta (concurrency 1)" in err


def test_a_worker_whose_registry_names_no_queue_asks_for_queue(db_url: str) -> None:
    done = run_cli("worker", "--url", db_url, "--app", "tests.support.apps.workload:registry")
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("caravel worker: --queue is required: ")
    assert "JobRegistry(queues=" in line
    assert "--queue NAME" in line


# ----- caravel jobs show and replay by id alone --------------------------------------------


async def _seed_jobs(url: str) -> dict[str, str]:
    """A ready job of tenant-b in emails, and a dead letter of tenant-c in reports."""
    async with open_queue(url, max_attempts=1) as queue:
        ready = await queue.enqueue(Add(1), dispatch(queue="emails", tenant="tenant-b"))
        dead = await queue.enqueue(Add(2), dispatch(queue="reports", tenant="tenant-c"))
        claimed = await Leases(queue).claim("reports")
        assert claimed is not None
        assert claimed.job_id == dead.job_id
        await Leases(queue).fail(claimed.lease, "HandlerFailed")
    return {"ready": str(ready.job_id), "dead": str(dead.job_id)}


async def _job_state(url: str, job_id: str) -> JobState | None:
    async with QueueInspector(url) as reader:
        found = await reader.find_job(job_id)
    return None if found is None else found.state


def test_jobs_show_finds_a_job_by_its_id_alone(db_url: str) -> None:
    ids = asyncio.run(_seed_jobs(db_url))
    done = run_cli("jobs", "show", "--json", ids["ready"], "--url", db_url, "--payload")
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert (shown["job_id"], shown["queue"], shown["tenant_id"]) == (
        ids["ready"],
        "emails",
        "tenant-b",
    )
    assert shown["payload"] == {"amount": 1, "note": ""}
    # A flag given must match; one left out matches the job's own.
    only_queue = run_cli("jobs", "show", "--json", ids["ready"], "--url", db_url, "-q", "emails")
    assert only_queue.returncode == 0, only_queue.stderr
    assert json.loads(only_queue.stdout)["tenant_id"] == "tenant-b"
    only_tenant = run_cli("jobs", "show", "--json", ids["ready"], "--url", db_url, "-t", "tenant-b")
    assert json.loads(only_tenant.stdout)["queue"] == "emails"
    for wrong in (("-q", "reports"), ("-t", "tenant-c"), ("-q", "emails", "-t", "Tenant-B")):
        missed = run_cli("jobs", "show", ids["ready"], "--url", db_url, *wrong)
        assert missed.returncode == 1, wrong
        assert missed.stdout == ""
        assert missed.stderr.strip() == "caravel jobs show: no such job in this queue and tenant"


def test_jobs_show_of_an_id_no_job_has_is_one_line_exit_one(db_url: str) -> None:
    asyncio.run(_seed_jobs(db_url))
    unknown = "6f1c8f3e-0b7e-4a43-9a2e-1a2b3c4d5e6f"
    done = run_cli("jobs", "show", unknown, "--url", db_url)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.strip() == "caravel jobs show: no such job: no job has this id"
    as_json = run_cli("jobs", "show", unknown, "--url", db_url, "--json")
    assert json.loads(as_json.stderr)["error"] == {
        "type": "JobNotFoundError",
        "message": "caravel jobs show: no such job: no job has this id",
        "exit_code": 1,
    }


def test_jobs_replay_by_id_alone_replays_in_the_jobs_own_queue_and_tenant(db_url: str) -> None:
    ids = asyncio.run(_seed_jobs(db_url))
    done = run_cli("jobs", "replay", ids["dead"], "--url", db_url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        f"replayed {ids['dead']} (queue reports, tenant tenant-c): ready, attempts reset"
    )
    assert asyncio.run(_job_state(db_url, ids["dead"])) is JobState.READY


def test_jobs_replay_by_id_alone_of_what_is_no_dead_letter_changes_nothing(db_url: str) -> None:
    ids = asyncio.run(_seed_jobs(db_url))
    done = run_cli("jobs", "replay", ids["ready"], "--url", db_url)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"caravel jobs replay: nothing replayed; {ids['ready']} is not a dead letter (it is ready)"
    )
    assert asyncio.run(_job_state(db_url, ids["ready"])) is JobState.READY
    unknown = run_cli("jobs", "replay", "6f1c8f3e-0b7e-4a43-9a2e-1a2b3c4d5e6f", "--url", db_url)
    assert unknown.returncode == 1
    assert unknown.stderr.strip() == "caravel jobs replay: nothing replayed; no job has this id"


def test_jobs_replay_with_a_flag_that_does_not_match_changes_nothing(db_url: str) -> None:
    ids = asyncio.run(_seed_jobs(db_url))
    for wrong in (("-q", "emails"), ("-t", "tenant-b")):
        done = run_cli("jobs", "replay", ids["dead"], "--url", db_url, *wrong)
        assert done.returncode == 1, wrong
        assert "nothing replayed" in done.stderr
        assert asyncio.run(_job_state(db_url, ids["dead"])) is JobState.DEAD_LETTER
    # The queue alone, matching, is enough: the tenant is the job's own.
    done = run_cli("jobs", "replay", ids["dead"], "--url", db_url, "-q", "reports")
    assert done.returncode == 0, done.stderr
    assert asyncio.run(_job_state(db_url, ids["dead"])) is JobState.READY
