"""``caravel metrics`` as a real process on every database: the signal printed once as JSON or
Prometheus text, served at ``/metrics`` over real HTTP until Ctrl+C, and one line for bad input.

The command reads the system clock, so the queue is seeded in the real past, and only what
cannot move in the seconds a test takes is checked to the unit; the exact ages and windows are
the HTTP tests' (``tests/integration/dashboard/test_metrics_http.py``, on a stood-still clock)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from uuid import uuid4

import httpx
import pytest

from caravel.store import open_store
from caravel.store.protocol import Store, WorkerRecord
from tests.acceptance.test_cli_json import one_document
from tests.store.conformance.builders import claim_one, insert, new_job
from tests.support.processes import CARAVEL, PYTHONPATH, ROOT, free_port, run_cli, wait_until

pytestmark = pytest.mark.slow


async def _seed(url: str) -> None:
    """``emails``: two jobs due (the oldest 600 s ago); ``reports``: one job finished 5 s ago;
    a worker serving both, heard from now."""
    now = int(time.time() * 1000)
    store: Store = open_store(url).inner
    try:
        await insert(
            store,
            [
                new_job(1, queue="emails", created_at=now - 600_000),
                new_job(2, queue="emails", created_at=now - 1_000),
                new_job(3, queue="reports", created_at=now - 6_000),
            ],
        )
        lease = (await claim_one(store, now - 6_000, queue="reports")).lease
        assert len(await store.job_complete_many([lease], now - 5_000)) == 1
        await store.worker_register(
            WorkerRecord(uuid4(), "host.example", 4242, ("emails", "reports"), 4, now, now, 0)
        )
    finally:
        await store.close()


def _check(document: dict[str, list[dict[str, object]]]) -> None:
    rows = {row["queue"]: row for row in document["queues"]}
    assert set(rows) == {"emails", "reports"}
    emails, reports = rows["emails"], rows["reports"]
    assert (emails["ready"], emails["running"], emails["workers"]) == (2, 0, 1)
    assert 600 <= emails["oldest_ready_age_seconds"] < 660  # type: ignore[operator]
    assert (reports["ready"], reports["finished_last_minute"], reports["workers"]) == (0, 1, 1)
    assert reports["oldest_ready_age_seconds"] == 0


async def test_prints_the_signal_once(db_url: str) -> None:
    await _seed(db_url)
    done = run_cli("metrics", "--url", db_url)
    _check(one_document(done, "caravel metrics"))  # the convention and the documented example

    one = run_cli("metrics", "--url", db_url, "--queue", "idle")
    assert json.loads(one.stdout)["queues"] == [
        {
            "queue": "idle",
            "ready": 0,
            "running": 0,
            "oldest_ready_age_seconds": 0.0,
            "finished_last_minute": 0,
            "workers": 0,
            "limits": None,
        }
    ]

    text = run_cli("metrics", "--url", db_url, "--format", "prometheus", "-q", "emails")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert "# TYPE caravel_queue_ready gauge" in lines
    assert 'caravel_queue_ready{queue="emails"} 2' in lines
    assert 'caravel_queue_workers{queue="emails"} 1' in lines
    assert not any('queue="reports"' in line for line in lines)


async def test_serves_the_signal_until_ctrl_c(db_url: str) -> None:
    await _seed(db_url)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(  # noqa: ASYNC220 (a server the test talks to)
        [CARAVEL, "metrics", "--url", db_url, "--serve", "--bind", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": PYTHONPATH},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def up() -> bool:
        if process.poll() is not None:
            return True
        try:
            httpx.get(base + "/metrics", timeout=1)
        except httpx.HTTPError:
            return False
        return True

    try:
        wait_until(up, what="caravel metrics --serve")
        assert process.poll() is None
        async with httpx.AsyncClient(base_url=base) as client:
            answer = await client.get("/metrics")
            assert answer.status_code == 200
            _check(answer.json())
            scrape = await client.get("/metrics", headers={"accept": "text/plain"})
            assert 'caravel_queue_ready{queue="emails"} 2' in scrape.text.splitlines()
            refused = await client.get("/metrics", headers={"x-forwarded-for": "203.0.113.5"})
            assert refused.status_code == 403
    finally:
        process.send_signal(signal.SIGINT)
        try:
            _, err = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            _, err = process.communicate()
    assert process.returncode == 0, err
    assert f"serving http://127.0.0.1:{port}/metrics (requests from this machine only)" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--queue", "Not A Queue"], "queue: must be 1 to 64 characters"),
        (["--format", "xml"], "--format: must be json or prometheus"),
        (["--keys", "5000"], "--keys: must be an integer from 0 to 1000"),
        (["--lost-after", "0"], "--lost-after: must be positive"),
        (["--max-age", "-1"], "--max-age: must be from 0 to 300 seconds"),
        (["--max-age", "301"], "--max-age: must be from 0 to 300 seconds"),
    ],
)
def test_bad_input_is_one_typed_line(tmp_path: object, args: list[str], message: str) -> None:
    done = run_cli("metrics", "--url", "sqlite:///unused.db", *args)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    error = json.loads(lines[0])["error"]
    assert error["type"] == "ValidationError"
    assert error["exit_code"] == 2
    assert error["message"].startswith(f"caravel metrics: {message}"), error


@pytest.mark.parametrize(
    ("bind", "message"),
    [
        ("127.0.0.1:0", "--bind the port must be from 1 to 65535"),
        ("127.0.0.1:99999", "--bind the port must be from 1 to 65535"),
        ("127.0.0.1", "--bind must look like 127.0.0.1:8765"),
        ("0.0.0.0:9464", "refusing to listen on 0.0.0.0"),
    ],
)
def test_a_bad_address_is_one_line(bind: str, message: str) -> None:
    done = run_cli("metrics", "--url", "sqlite:///unused.db", "--serve", "--bind", bind)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert done.stderr.startswith(f"caravel metrics: {message}")


def test_a_port_in_use_is_one_line(db_url: str) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        done = run_cli("metrics", "--url", db_url, "--serve", "--bind", f"127.0.0.1:{port}")
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"caravel metrics: port {port} on 127.0.0.1 is already in use; stop what holds it or "
        f"choose another with --bind, e.g. --bind 127.0.0.1:{port + 1}"
    )
