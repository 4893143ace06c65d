"""``caravel workflows`` as an operator runs it, in subprocesses on real databases: the list with
states and counts, one workflow's steps with what blocks them (which dependency failed, which
signal, which timer) and never a payload or result, a cancel behind the confirmation every
destructive command asks for, a signal that releases the step waiting for it, and bad input as
one typed line without a traceback."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import select
import subprocess
import time

import pytest

from caravel import QueueInspector
from caravel.workflows import WorkflowStatus
from tests.support.dashboard.workflows import SECRET, TENANT, WORKFLOW_QUEUE, Made, make_workflow
from tests.support.processes import CARAVEL, PYTHONPATH, ROOT, run_cli

pytestmark = pytest.mark.slow  # the console script, in subprocesses

UNKNOWN = "0190aaaa-0000-7000-8000-000000000000"


@pytest.fixture
def made(db_url: str) -> Made:
    return asyncio.run(make_workflow(db_url))


def _status(url: str, made: Made) -> WorkflowStatus:
    async def read() -> WorkflowStatus:
        async with QueueInspector(url) as reader:
            found = await reader.get_workflow(made.workflow_id)
        assert found is not None
        return found

    return asyncio.run(read())


def test_list_shows_state_and_counts(db_url: str, made: Made) -> None:
    done = run_cli("workflows", "list", "--url", db_url, "--json")
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)["workflows"]
    assert row["workflow_id"] == str(made.workflow_id)
    assert (row["name"], row["tenant_id"], row["state"], row["total"]) == (
        "thumbnails",
        TENANT,
        "running",
        8,
    )
    assert row["counts"] == {  # held includes blocked, as the API counts them
        "ready": 1,
        "held": 2,
        "blocked": 1,
        "running": 0,
        "completed": 4,
        "dead_letter": 1,
        "cancelled": 0,
    }
    assert row["created_at"].endswith("Z")
    assert row["finished_at"] is None

    table = run_cli("workflows", "list", "--url", db_url)
    assert table.returncode == 0, table.stderr
    assert str(made.workflow_id) in table.stdout
    assert "thumbnails" in table.stdout
    other = run_cli("workflows", "list", "--url", db_url, "--tenant", "nobody")
    assert (other.returncode, other.stdout.strip()) == (0, "no workflows")


def test_show_explains_every_step_without_payloads(db_url: str, made: Made) -> None:
    done = run_cli("workflows", "show", str(made.workflow_id), "--url", db_url, "--json")
    assert done.returncode == 0, done.stderr
    assert SECRET not in done.stdout
    found = json.loads(done.stdout)
    assert (found["workflow_id"], found["state"]) == (str(made.workflow_id), "running")
    steps = {s["step"]: s for s in found["steps"]}
    assert found["steps"][0]["step"] == "fetch"  # by layer
    resize = steps["resize"]
    assert (resize["group"], resize["members"], resize["job_id"], resize["state"]) == (
        True,
        4,
        None,
        "dead_letter",
    )
    assert (resize["counts"]["completed"], resize["counts"]["dead_letter"]) == (3, 1)
    assert resize["failed"] == [
        {
            "job_id": str(made.failed),
            "queue": WORKFLOW_QUEUE,
            "label": "resize[2]",
            "state": "dead_letter",
        }
    ]
    merge = steps["merge"]
    assert (merge["state"], merge["after"], merge["on_failure"]) == ("blocked", ["resize"], "stop")
    assert merge["reasons"] == [
        "blocked: resize[2] was dead-lettered; replay it to resume (on_failure is stop)"
    ]
    approve = steps["approve"]
    assert (approve["wait_signal"], approve["signal_received"], approve["timeout_seconds"]) == (
        "approved",
        False,
        259200.0,
    )
    assert "waits for signal 'approved'" in approve["reasons"][0]
    publish = steps["publish"]
    assert publish["delay_seconds"] == 300.0
    assert publish["reasons"] == [
        "waits for approve (waiting)",
        "timer: runs no earlier than 5 min after its dependencies finished",
    ]

    table = run_cli("workflows", "show", str(made.workflow_id), "--url", db_url)
    assert table.returncode == 0, table.stderr
    assert SECRET not in table.stdout
    assert f"workflow {made.workflow_id} (tenant {TENANT}, name thumbnails)" in table.stdout
    assert "resize[2] was dead-lettered" in table.stdout
    assert f"  resize[2] {made.failed} dead_letter (queue {WORKFLOW_QUEUE})" in table.stdout
    assert "1 dead-lettered, 3 completed" in table.stdout


def test_cancel_asks_first_and_a_dry_run_changes_nothing(db_url: str, made: Made) -> None:
    ident = str(made.workflow_id)
    refused = run_cli("workflows", "cancel", ident, "--url", db_url)
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        "caravel workflows cancel: --yes: is required when standard input is not a terminal"
    )
    dry = run_cli("workflows", "cancel", ident, "--url", db_url, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout) == {
        "workflow_id": ident,
        "tenant_id": TENANT,
        "dry_run": True,
        "matched": {"waiting": 3, "running": 0},
        "changed": 0,
    }
    assert _status(db_url, made).cancelled_at is None

    done = run_cli("workflows", "cancel", ident, "--url", db_url, "--yes")
    assert (done.returncode, done.stdout.strip()) == (
        0,
        f"cancelled 3 steps of {ident} (3 not started, 0 running before)",
    )
    status = _status(db_url, made)
    assert (status.state, status.counts["cancelled"], status.counts["completed"]) == (
        "cancelled",
        3,
        4,
    )
    again = run_cli("workflows", "cancel", ident, "--url", db_url, "--yes")
    assert again.returncode == 1
    assert again.stderr.strip() == (
        f"caravel workflows cancel: nothing to cancel; every step of {ident} has finished"
    )


def _answer(args: list[str], answer: bytes) -> tuple[int, str]:
    """Run the command with a terminal on standard input, answer its question, return its
    exit code and what it wrote on the terminal."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [CARAVEL, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": PYTHONPATH},
        stdin=terminal,
        stdout=subprocess.PIPE,
        stderr=terminal,
    )
    os.close(terminal)
    seen = b""
    deadline = time.monotonic() + 60
    try:
        while b"?" not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 1)
            if ready:
                seen += os.read(controller, 1024)
        os.write(controller, answer + b"\n")
        out, _ = process.communicate(timeout=60)
    finally:
        os.close(controller)
    return process.returncode, seen.decode() + out.decode()


def test_cancel_on_a_terminal_asks_and_a_no_changes_nothing(db_url: str, made: Made) -> None:
    ident = str(made.workflow_id)
    code, said = _answer(["workflows", "cancel", ident, "--url", db_url], b"n")
    assert f"Cancel workflow {ident} (3 not started, 0 running)?" in said
    assert code == 1
    assert _status(db_url, made).cancelled_at is None
    code, said = _answer(["workflows", "cancel", ident, "--url", db_url], b"y")
    assert code == 0, said
    assert f"cancelled 3 steps of {ident}" in said
    assert _status(db_url, made).cancelled_at is not None


def test_signal_releases_the_step_waiting_for_it_once(db_url: str, made: Made) -> None:
    ident = str(made.workflow_id)
    sent = run_cli(
        "workflows", "signal", ident, "approved", "--url", db_url, "--payload", '{"by": "ops"}'
    )
    assert (sent.returncode, sent.stdout.strip()) == (0, f"signal 'approved' recorded for {ident}")
    assert "ops" not in sent.stdout
    approve = _status(db_url, made).step("approve")
    assert approve is not None
    assert approve.signal_received
    again = run_cli("workflows", "signal", ident, "approved", "--url", db_url, "--json")
    assert again.returncode == 1
    assert json.loads(again.stdout) == {
        "workflow_id": ident,
        "tenant_id": TENANT,
        "signal": "approved",
        "recorded": False,
    }


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("show", "nope"), "workflow_id"),
        (("cancel", "nope", "--yes"), "workflow_id"),
        (("signal", "nope", "approved"), "workflow_id"),
        (("signal", UNKNOWN, "approved", "--payload", "{nope"), "--payload"),
        (("signal", UNKNOWN, "no spaces"), "name"),
        (("list", "--limit", "0"), "--limit"),
        (("list", "--tenant", "x" * 300), "--tenant"),
    ],
)
def test_bad_input_exits_2_in_one_typed_line(
    db_url: str, args: tuple[str, ...], field: str
) -> None:
    done = run_cli("workflows", *args, "--url", db_url)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"caravel workflows {args[0]}: {field}: ")
    assert "Traceback" not in done.stderr
    as_json = run_cli("workflows", *args, "--url", db_url, "--json")
    error = json.loads(as_json.stderr)["error"]
    assert error["exit_code"] == 2
    assert error["type"] in ("ValidationError", "WorkflowError")


@pytest.mark.parametrize("command", ["show", "cancel", "signal"])
def test_an_unknown_workflow_exits_1(db_url: str, command: str) -> None:
    extra = {"show": (), "cancel": ("--yes",), "signal": ("approved",)}[command]
    done = run_cli("workflows", command, UNKNOWN, *extra, "--url", db_url)
    assert (done.returncode, done.stderr.strip()) == (
        1,
        f"caravel workflows {command}: no such workflow",
    )
    as_json = run_cli("workflows", command, UNKNOWN, *extra, "--url", db_url, "--json")
    assert json.loads(as_json.stderr)["error"]["type"] == "WorkflowNotFoundError"
