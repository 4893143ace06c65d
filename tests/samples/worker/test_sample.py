"""The worker sample on each database: its commands as a reader runs them (SQLite's two files,
or the one PostgreSQL or MariaDB database holding the queue and the results), and a worker that
dies after saving a result and before acknowledging it, whose job runs again once its lease ends
(on a manual clock) without counting twice. ``scripts/smoke-worker.sh`` runs the SQLite side
from a freshly built wheel, with real crashes and signals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from typing import Any

import pytest
from caravel_samples.worker import results, schema
from caravel_samples.worker.jobs import QUEUE, TENANT, AddToReport, registry
from caravel_samples.worker.settings import Settings
from sqlalchemy.ext.asyncio import async_sessionmaker

from caravel import DatabaseQueue, DispatchOptions, Leases, QueueOptions, QueueWorker
from caravel.testing import ManualClock


def _sample(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "caravel_samples.worker", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _json(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow  # a dozen processes, each importing the sample and opening its databases
def test_the_commands_migrate_enqueue_work_and_report(worker_env: dict[str, str]) -> None:
    unmigrated = _sample(worker_env, "check-model")
    assert unmigrated.returncode == 1
    queue_problem, results_problem = unmigrated.stderr.splitlines()
    assert queue_problem.startswith(("queue.db: ", "queue: "))
    assert results_problem.endswith("run `python -m caravel_samples.worker migrate`")
    assert _sample(worker_env, "work-once").returncode == 1

    assert _sample(worker_env, "migrate").returncode == 0
    checked = _sample(worker_env, "check-model")
    assert checked.returncode == 0, checked.stderr
    first = _json(_sample(worker_env, "enqueue-demo"))["jobs"]
    again = _sample(worker_env, "enqueue-demo")
    second = _json(again)["jobs"]
    assert [j["job_id"] for j in second] == [j["job_id"] for j in first]
    assert [j["already_enqueued"] for j in second] == [True] * 3
    claims = [_json(_sample(worker_env, "work-once"))["claimed"] for _ in range(4)]
    assert claims == [True, True, True, False]
    assert _json(_sample(worker_env, "report")) == {"events": 3, "total": 6}
    (counts,) = _json(_sample(worker_env, "queue-status"))["queues"]
    assert (counts["queue"], counts["completed"], counts["ready"]) == (QUEUE, 3, 0)


async def test_a_job_whose_worker_died_after_saving_runs_again_without_counting_twice(
    worker_env: dict[str, str],
) -> None:
    settings = Settings.from_environment()
    schema.migrate_all(settings)
    clock = ManualClock()
    lease = timedelta(seconds=settings.lease_seconds)
    engine = results.create_engine(settings)
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    try:
        async with DatabaseQueue(
            settings.queue_url, registry, options=QueueOptions(lease_duration=lease), clock=clock
        ) as queue:
            await queue.enqueue_many(
                [
                    (AddToReport(n), DispatchOptions(queue=QUEUE, tenant_id=TENANT))
                    for n in (1, 2, 3)
                ]
            )
            # A worker claims a job and its handler saves the result; then the worker dies
            # before it acknowledges: its lease is left to run out.
            claimed = await Leases(queue).claim(QUEUE)
            assert claimed is not None
            quantity = json.loads(claimed.payload)["quantity"]
            async with sessions() as session:
                assert await results.record(session, claimed.lease.job_id, TENANT, quantity)
            await clock.advance(lease + timedelta(seconds=1))

            async with QueueWorker(queue, scope=sessions) as worker:
                runs = 0
                while await worker.run_once(QUEUE):
                    runs += 1
            assert runs == 3  # the job whose lease ran out, then the two never claimed
            assert await results.report(engine) == {"events": 3, "total": 6}
            status = await queue.get_status(claimed.lease.job_id, QUEUE, TENANT)
            assert status is not None
            assert (status.state, status.attempt) == ("completed", 2)
    finally:
        await engine.dispose()


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"CARAVEL_WORKER_DATABASE_PROVIDER": "oracle"}, "must be sqlite, postgres or mariadb"),
        ({}, "CARAVEL_WORKER_DIRECTORY: must name an existing folder"),
        (
            {"CARAVEL_WORKER_DATABASE_PROVIDER": "mariadb"},
            "CARAVEL_WORKER_DATABASE_URL: is required: a mariadb:// URL",
        ),
        (
            {
                "CARAVEL_WORKER_DATABASE_PROVIDER": "mariadb",
                "CARAVEL_WORKER_DATABASE_URL": "postgresql://app:s3cret@db/app",
            },
            "must be a mariadb:// URL with CARAVEL_WORKER_DATABASE_PROVIDER=mariadb",
        ),
        (
            {
                "CARAVEL_WORKER_DATABASE_PROVIDER": "postgres",
                "CARAVEL_WORKER_DATABASE_URL": "mariadb://app:s3cret@db",
            },
            "must be a postgresql:// URL with CARAVEL_WORKER_DATABASE_PROVIDER=postgres, naming",
        ),
    ],
)
def test_settings_name_the_variable_and_never_repeat_the_url(
    variables: dict[str, str], message: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CARAVEL_WORKER_")}
    done = subprocess.run(
        [sys.executable, "-m", "caravel_samples.worker", "report"],
        env={**env, **variables},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert message in done.stderr
    assert "s3cret" not in done.stderr


@pytest.mark.parametrize("scheme", ["mariadb", "mysql", "mariadb+asyncmy"])
def test_a_mariadb_url_reaches_the_queue_without_its_driver(
    monkeypatch: pytest.MonkeyPatch, scheme: str
) -> None:
    monkeypatch.setenv("CARAVEL_WORKER_DATABASE_PROVIDER", "mariadb")
    monkeypatch.setenv("CARAVEL_WORKER_DATABASE_URL", f"{scheme}://app:pw@db:3306/app")
    settings = Settings.from_environment()
    assert settings.queue_url == "mariadb://app:pw@db:3306/app"
    assert settings.results_url(blocking=True).drivername == "mariadb+pymysql"
    assert settings.results_url().drivername == "mariadb+asyncmy"
