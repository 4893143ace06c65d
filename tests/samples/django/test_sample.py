"""The Django sample: its own tests under Django's test runner (``python -m
caravel_samples.django test``) on SQLite, PostgreSQL and MariaDB, and the sample as an operator
runs it: ``migrate``, an order through the view, ``caravel_worker`` as a real process running
the receipt, the result read back, ``caravel_status``, SIGTERM and exit 0.

Each runs the sample in processes of its own: Django's settings are process-wide, and this
suite's own Django tests (tests/django) configure them differently."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.databases import (
    create_mariadb_database,
    create_pg_database,
    drop_mariadb_database,
    drop_pg_database,
)
from tests.support.processes import wait_until

pytestmark = pytest.mark.django

SAMPLE = [sys.executable, "-m", "caravel_samples.django"]


def run(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 120) -> str:
    done = subprocess.run(
        [*SAMPLE, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def last_json(args: list[str], env: dict[str, str], cwd: Path) -> Any:
    """The JSON document a command printed on its last line of standard output."""
    done = subprocess.run(
        [*SAMPLE, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def environment(url: str) -> dict[str, str]:
    return {**os.environ, "CARAVEL_DATABASE_URL": url, "PYTHONUNBUFFERED": "1"}


def test_the_samples_tests_pass_on_sqlite(tmp_path: Path) -> None:
    output = run(["test", "--noinput"], environment(f"sqlite:///{tmp_path}/shop.db"), tmp_path)
    assert "Ran 4 tests" in output


@pytest.mark.parametrize(
    ("create", "drop"),
    [
        pytest.param(create_pg_database, drop_pg_database, marks=pytest.mark.postgres, id="pg"),
        pytest.param(
            create_mariadb_database, drop_mariadb_database, marks=pytest.mark.mariadb, id="maria"
        ),
    ],
)
def test_the_samples_tests_pass_on_a_database_server(
    tmp_path: Path, create: Callable[[str], str], drop: Callable[[str], None]
) -> None:
    # Django's test runner makes (and drops) a test database of its own beside this one.
    url = create("caravel_django_sample")
    try:
        output = run(["test", "--noinput"], environment(url), tmp_path)
    finally:
        drop(url)
    assert "Ran 4 tests" in output


ORDER = """
import json
from django.test import Client
made = Client().post("/orders", json.dumps({"email": "ann@example.com", "total_cents": 990}),
                     content_type="application/json")
print(json.dumps(made.json()))
"""

SHOW = """
from django.test import Client
print(Client().get("/orders/%d").content.decode())
"""


@pytest.mark.slow
def test_a_worker_process_runs_the_receipt(tmp_path: Path) -> None:
    env = environment(f"sqlite:///{tmp_path}/shop.db")
    run(["migrate", "--noinput"], env, tmp_path)
    order = last_json(["shell", "-c", ORDER], env, tmp_path)
    worker = subprocess.Popen(
        [*SAMPLE, "caravel_worker", "--concurrency", "2", "--poll-interval", "0.2"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until(
            lambda: (
                last_json(["shell", "-c", SHOW % order["id"]], env, tmp_path)["receipt"]["status"]
                == "SUCCESSFUL"
            ),
            timeout=60,
            what="the order's receipt",
            interval=0.3,
        )
        # Once more: the view reads the order before the result, so the read that first saw
        # the result finished may have seen the order a moment before the task changed it.
        shown = last_json(["shell", "-c", SHOW % order["id"]], env, tmp_path)
        status = last_json(["caravel_status", "--json"], env, tmp_path)
    finally:
        worker.send_signal(signal.SIGTERM)
        output, _ = worker.communicate(timeout=60)
    assert worker.returncode == 0, output
    assert "processing" in output
    assert shown["receipt_sent"] is True, (shown, output)
    assert shown["receipt"]["return_value"] == {
        "order": order["id"],
        "receipt": f"R-{order['id']:06d}",
        "attempt": 1,
    }
    assert order["receipt_task"].startswith("receipts:")
    assert "receipts" in json.dumps(status)
