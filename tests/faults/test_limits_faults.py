"""Concurrency limits under crashes: three worker processes (eighteen handler slots) share a
queue limited to 10 running jobs and 2 per partition key, while a seeded schedule SIGKILLs
workers (a supervisor restarts them) and SIGSTOPs others past their leases. The handlers' own
start and end records (:mod:`tests.faults.limits_app`) must show the limits never exceeded,
counting a run whose lease expired as finished only from that moment, and every job must
complete. On SQLite the processes share one file on one host; on PostgreSQL and MariaDB one
database.

The rate under the same faults: three worker processes on a queue allowed 20 starts a second;
the claim times the handlers read from their jobs' rows must never hold more than 20 within any
second, and every job must complete.

Both at once, on two hosts: four worker processes on a queue with both limits and the rate;
on PostgreSQL and MariaDB two of them run on a second network host (a network namespace,
reaching the server through a proxy on its link), on SQLite all four share one file on this
host. The
schedule faults every worker, the second host's too. The handlers' records must show neither
limit nor the rate ever exceeded, and each job must complete by its last claim with exactly one
effect in the application database (a re-run after a takeover writes none).

On PostgreSQL the queue and the app database live on this test process's own cluster
(``pg_cluster``): a fleet of workers and their handlers' connections, beside the other tests'
pools on the shared server, once ran it out of connections ("too many clients").

On MariaDB they live on this test process's own server (``mariadb_server``) for the same
reason: four workers with pools of up to 40 connections each, and their handlers', beside the
other tests' on the shared server (151 connections).

The scenarios and their checks are :mod:`tests.faults.limits_scenarios`, which the soak runs
for longer (``python -m tests.faults.soak --scenario limits,rate,combined``)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.faults.limits_scenarios import (
    COMBINED,
    LIMITS,
    RATED,
    check_combined,
    check_limits,
    check_rate,
    run_scenario,
    second_host,
)
from tests.faults.netns import require_namespaces

pytestmark = pytest.mark.slow

SEED = 20261203


@pytest.fixture
def urls(backend: str, request: pytest.FixtureRequest) -> tuple[str, str]:
    """The queue and the app database: ``db_url`` and ``app_url`` on SQLite, the private
    cluster's on PostgreSQL, the private server's on MariaDB."""
    if backend == "sqlite":
        return request.getfixturevalue("db_url"), request.getfixturevalue("app_url")
    if backend == "mariadb":
        found: tuple[str, str] = request.getfixturevalue("private_maria_urls")
        return found
    return (
        request.getfixturevalue("cluster_queue_url"),
        request.getfixturevalue("cluster_app_url"),
    )


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mariadb"])
def test_limits_hold_while_workers_are_killed_and_stopped(
    urls: tuple[str, str], tmp_path: Path
) -> None:
    db_url, app_url = urls
    run = run_scenario(LIMITS, db_url, app_url, tmp_path, random.Random(SEED))
    # At most the limits at once, and each reached; all 400 jobs completed, some runs
    # interrupted and run again; at least six kills and four stops.
    print("limits-figures", check_limits(run))


# This checker once saw 21 claims within one second under a rate of 20: a claim whose clock was
# read before it waited its turn ran after one with a later clock, which had deleted starts still
# inside the first one's window (see caravel.flow.window.window_clock).
@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mariadb"])
def test_a_rate_holds_while_workers_are_killed_and_stopped(
    urls: tuple[str, str], tmp_path: Path
) -> None:
    db_url, app_url = urls
    run = run_scenario(RATED, db_url, app_url, tmp_path, random.Random(SEED + 1))
    # At most the rate within any period, and reached; all 300 jobs completed, each job's
    # last claim witnessed, some claimed again; at least six kills and four stops.
    print("rate-figures", check_rate(run))


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "mariadb"])
def test_limits_and_a_rate_hold_together_on_two_hosts_while_workers_are_killed_and_stopped(
    urls: tuple[str, str], tmp_path: Path, backend: str
) -> None:
    db_url, app_url = urls
    if backend != "sqlite":
        require_namespaces()  # under CI=true a missing capability fails instead of skipping
    with second_host(COMBINED, db_url) as host:
        run = run_scenario(COMBINED, db_url, app_url, tmp_path, random.Random(SEED + 2), host=host)
    # At most 10 runs at once, 2 of one key and 20 claims within any second, each reached; all
    # 400 jobs completed by their last claim, one effect each, some run again; at least six
    # kills and four stops, and on PostgreSQL and MariaDB two of each to either host's workers.
    print("combined-figures", check_combined(run))
