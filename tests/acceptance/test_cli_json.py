"""The command line's JSON convention (docs/reference/cli.md, "JSON output"), checked against the
documentation itself: each command's ```json example is read from its section of the reference,
and the real command's output, on a real database, must have the same keys and kinds of value.
So the documented shape and the code cannot drift apart. Errors under ``--json`` are one line
of JSON on stderr, the same shape for every command, carrying the line the text mode prints."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from caravel import Leases
from caravel.testing import ManualClock
from tests.support import Add, dispatch, open_queue
from tests.support.dashboard.workflows import make_workflow
from tests.support.databases import SqliteTemplate
from tests.support.processes import ROOT, WorkerProcess, run_cli, wait_until

pytestmark = pytest.mark.slow  # the console script, in subprocesses

REFERENCE = ROOT / "docs" / "reference" / "cli.md"
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
SNAKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
#: Keys whose value is a document of the application's own (a job's payload, what its handler
#: returned or set as metadata): any JSON.
OPAQUE = {"payload", "result", "meta"}
#: Objects whose keys are data (partition keys), not fields: any keys, each with an integer.
MAPS = {"weights"}


# ----- the documented examples ----------------------------------------------------------


def documented() -> dict[str, Any]:
    """Heading -> the first ```json block in that heading's section (up to the next heading)."""
    examples: dict[str, Any] = {}
    heading = None
    lines = REFERENCE.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines):
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        elif line.strip() == "```json" and heading is not None and heading not in examples:
            end = lines.index("```", number + 1)
            examples[heading] = json.loads("\n".join(lines[number + 1 : end]))
    return examples


EXAMPLES = documented()


def conventional(value: Any, where: str = "") -> None:
    """The rules every document follows, whatever its command."""
    if isinstance(value, list):
        for item in value:
            conventional(item, where + "[]")
        return
    if not isinstance(value, dict):
        return
    for key, item in value.items():
        path = f"{where}.{key}"
        assert SNAKE.match(key), f"{path}: keys are snake_case"
        if key in OPAQUE:
            continue
        if key.endswith("_at"):
            assert item is None or (isinstance(item, str) and TIMESTAMP.match(item)), (
                f"{path}: a time is UTC with milliseconds and a Z, got {item!r}"
            )
        elif key.endswith("_seconds"):
            # null where the duration is unknown (an attempt record without its claim time).
            assert item is None or isinstance(item, int | float), f"{path}: a duration is seconds"
            assert not isinstance(item, bool), path
        elif key.endswith("_id") or key == "id":
            assert item is None or isinstance(item, str), f"{path}: ids are strings"
        conventional(item, path)


def same_shape(example: Any, actual: Any, where: str = "$") -> None:
    """``actual`` has the example's keys (all of them, no others) and kinds of value. A value
    the example shows may be null in the output (a job that never started); an example's null
    stands for a nullable string; each element of a list has the shape of one of the example's;
    an object of :data:`MAPS` may have any keys, each with an integer."""
    if where.rsplit(".", 1)[-1] in OPAQUE or actual is None:
        return
    if where.rsplit(".", 1)[-1] in MAPS:
        assert isinstance(actual, dict), f"{where}: {actual!r} is not an object"
        assert all(type(n) is int for n in actual.values()), f"{where}: {actual!r}"
        return
    if example is None:
        assert isinstance(actual, str), f"{where}: {actual!r} where the example has null"
    elif isinstance(example, dict):
        assert isinstance(actual, dict), f"{where}: {actual!r} is not an object"
        assert set(actual) == set(example), f"{where}: keys {sorted(actual)} != {sorted(example)}"
        for key in example:
            same_shape(example[key], actual[key], f"{where}.{key}")
    elif isinstance(example, list):
        assert isinstance(actual, list), f"{where}: {actual!r} is not a list"
        assert example, f"{where}: the documented example's list must show an element"
        for item in actual:
            _like_one(example, item, f"{where}[]")
    elif isinstance(example, bool) or isinstance(actual, bool):
        assert type(actual) is type(example), f"{where}: {actual!r} vs {example!r}"
    elif isinstance(example, int | float):
        assert isinstance(actual, int | float), f"{where}: {actual!r} is not a number"
        if isinstance(example, int):
            assert isinstance(actual, int), f"{where}: {actual!r} is not an integer"
    else:
        assert isinstance(actual, type(example)), f"{where}: {actual!r} vs {example!r}"


def _like_one(examples: list[Any], actual: Any, where: str) -> None:
    """``actual`` has the shape of one of the ``examples`` (an example's list may show
    elements of several shapes: a workflow's steps with and without waits); the first
    example's mismatch is the one reported."""
    first: AssertionError | None = None
    for example in examples:
        try:
            same_shape(example, actual, where)
        except AssertionError as exc:
            first = first or exc
        else:
            return
    assert first is not None
    raise first


def one_document(done: subprocess.CompletedProcess[str], command: str) -> dict[str, Any]:
    """Exit 0 and one JSON object on one line of stdout, following the convention and the
    documented example of ``command``."""
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout
    found = json.loads(lines[0])
    assert isinstance(found, dict), "a document is an object, never a bare list"
    conventional(found)
    same_shape(EXAMPLES[command], found)
    return found


def json_commands() -> list[str]:
    """Every command of the real tree that takes --json, as ``caravel jobs list``."""
    from caravel.cli.main import command

    found: list[str] = []
    pending = [("caravel", command())]
    while pending:
        path, current = pending.pop()
        if any("--json" in getattr(p, "opts", ()) for p in current.params):
            found.append(path)
        for name, sub in getattr(current, "commands", {}).items():
            pending.append((f"{path} {name}", sub))
    return sorted(found)


JSON_COMMANDS = json_commands()


def test_every_command_with_json_has_a_documented_example() -> None:
    assert {"caravel status", "caravel jobs list", "caravel workers"} <= set(JSON_COMMANDS)
    missing = [name for name in JSON_COMMANDS if name not in EXAMPLES]
    assert missing == [], f"no ```json example under these headings of {REFERENCE.name}"


@pytest.mark.parametrize("heading", sorted(EXAMPLES))
def test_the_documented_examples_follow_the_convention(heading: str) -> None:
    example = EXAMPLES[heading]
    assert isinstance(example, dict)
    conventional(example)


def test_the_documented_error_names_type_message_and_exit_code() -> None:
    error = EXAMPLES["Errors"]["error"]
    assert set(error) == {"type", "message", "exit_code"}
    assert error["exit_code"] in (1, 2)


# ----- the real commands, on real databases ----------------------------------------------


async def _seed(url: str) -> None:
    """A ready job, a delayed one, a dead letter and a live running one."""
    now = datetime.now(UTC)
    async with open_queue(url, clock=ManualClock(now), lease_duration=timedelta(hours=1)) as queue:
        dead = await queue.enqueue(Add(1), dispatch(queue="docs", max_attempts=1))
        claimed = await Leases(queue).claim("docs")
        assert claimed is not None
        assert claimed.job_id == dead.job_id
        await Leases(queue).fail(claimed.lease, "HandlerFailed")
        running = await queue.enqueue(Add(2), dispatch(queue="docs"))
        claimed = await Leases(queue).claim("docs")
        assert claimed is not None
        assert claimed.job_id == running.job_id
        await queue.enqueue(Add(3), dispatch(queue="docs"))
        await queue.enqueue(Add(4), dispatch(queue="docs", not_before=now + timedelta(days=1)))


@pytest.fixture
def seeded(db_url: str) -> str:
    asyncio.run(_seed(db_url))
    return db_url


@pytest.fixture
def sqlite_seeded(tmp_path: Path, sqlite_template: SqliteTemplate) -> str:
    url = sqlite_template.copy_to(tmp_path / "queue.db")
    asyncio.run(_seed(url))
    return url


def test_status(seeded: str) -> None:
    found = one_document(run_cli("status", "--url", seeded, "--json"), "caravel status")
    (row,) = found["queues"]
    assert (row["ready"], row["delayed"], row["running"], row["dead_letter"]) == (1, 1, 1, 1)
    assert row["oldest_ready_due_at"] is not None
    assert row["limits"] is None


def test_jobs_list(seeded: str) -> None:
    found = one_document(run_cli("jobs", "list", "--url", seeded, "--json"), "caravel jobs list")
    assert sorted(job["state"] for job in found["jobs"]) == [
        "dead_letter",
        "ready",
        "ready",
        "running",
    ]
    dead = next(job for job in found["jobs"] if job["state"] == "dead_letter")
    assert dead["last_failure"] == "HandlerFailed"
    assert dead["finished_at"] is not None


def test_jobs_show(sqlite_seeded: str) -> None:
    listed = json.loads(run_cli("jobs", "list", "--url", sqlite_seeded, "--json").stdout)
    job = listed["jobs"][0]
    where = ("--url", sqlite_seeded, "-q", job["queue"], "-t", job["tenant_id"])
    shown = one_document(
        run_cli("jobs", "show", "--json", job["job_id"], *where), "caravel jobs show"
    )
    assert isinstance(shown.pop("attempts"), list)
    assert shown == {**job, "held": False, "payload": None, "result": None}
    with_payload = one_document(
        run_cli("jobs", "show", job["job_id"], *where, "--payload", "--json"), "caravel jobs show"
    )
    assert set(with_payload["payload"]) == {"amount", "note"}


def test_jobs_cancel(seeded: str) -> None:
    where = ("--url", seeded, "-q", "docs", "--json")
    dry = one_document(run_cli("jobs", "cancel", *where, "--dry-run"), "caravel jobs cancel")
    # The ready job and the delayed one are both stored as ready.
    assert (dry["matched"], dry["changed"], dry["job_id"]) == ({"ready": 2, "running": 1}, 0, None)
    done = one_document(run_cli("jobs", "cancel", *where, "--yes"), "caravel jobs cancel")
    assert (done["dry_run"], done["changed"], done["outcome"]) == (False, 3, None)
    listed = json.loads(run_cli("jobs", "list", "--url", seeded, "--json").stdout)
    assert sorted(job["state"] for job in listed["jobs"]) == ["cancelled"] * 3 + ["dead_letter"]
    job = next(j for j in listed["jobs"] if j["state"] == "cancelled")
    again = run_cli("jobs", "cancel", job["job_id"], *where, "-t", job["tenant_id"])
    assert again.returncode == 1
    assert json.loads(again.stdout)["outcome"] == "already_finished"


def test_jobs_delete(seeded: str) -> None:
    listed = json.loads(run_cli("jobs", "list", "--url", seeded, "--json").stdout)
    dead = next(j for j in listed["jobs"] if j["state"] == "dead_letter")
    where = ("--url", seeded, "-q", "docs", "-t", dead["tenant_id"], "--json")
    found = one_document(run_cli("jobs", "delete", dead["job_id"], *where), "caravel jobs delete")
    assert (found["outcome"], found["changed"], found["job_id"]) == ("deleted", 1, dead["job_id"])
    dry = one_document(run_cli("jobs", "delete", *where, "--dry-run"), "caravel jobs delete")
    assert dry["matched"] == {"completed": 0, "dead_letter": 0, "cancelled": 0}


def test_jobs_prune(sqlite_seeded: str) -> None:
    where = ("--url", sqlite_seeded, "--completed", "7d", "--dead-letter", "90d", "--keys", "30d")
    found = one_document(
        run_cli("jobs", "prune", *where, "--dry-run", "--json"), "caravel jobs prune"
    )
    assert found == {"dry_run": True, "deleted": 0, "tombstoned": 0, "tombstones_deleted": 0}


def test_jobs_replay(seeded: str) -> None:
    listed = json.loads(run_cli("jobs", "list", "--url", seeded, "--json").stdout)
    dead = next(j for j in listed["jobs"] if j["state"] == "dead_letter")
    found = one_document(
        run_cli("jobs", "replay", dead["job_id"], "--url", seeded, "--json"), "caravel jobs replay"
    )
    assert found == {
        "job_id": dead["job_id"],
        "queue": "docs",
        "tenant_id": dead["tenant_id"],
        "replayed": True,
    }
    again = error_of(run_cli("jobs", "replay", dead["job_id"], "--url", seeded, "--json"), 1)
    assert again["type"] == "NothingReplayedError"
    assert again["message"].endswith("is not a dead letter (it is ready)")


def test_jobs_replay_dead(seeded: str) -> None:
    listed = json.loads(run_cli("jobs", "list", "--url", seeded, "--json").stdout)
    dead = next(j for j in listed["jobs"] if j["state"] == "dead_letter")
    done = run_cli("jobs", "replay-dead", "--url", seeded, "--yes", "--json")
    found = one_document(done, "caravel jobs replay-dead")
    assert found == {
        "matched": 1,
        "replayed": 1,
        "jobs": [
            {
                "job_id": dead["job_id"],
                "queue": "docs",
                "tenant_id": dead["tenant_id"],
                "replayed": True,
            }
        ],
    }
    assert done.stderr == ""  # the jobs are in the document, not in lines on stderr
    nothing = error_of(run_cli("jobs", "replay-dead", "--url", seeded, "--yes", "--json"), 1)
    assert nothing["type"] == "NothingReplayedError"


def test_db_upgrade_and_downgrade(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    up = one_document(run_cli("db", "upgrade", "--url", url, "--json"), "caravel db upgrade")
    assert up["previous"] is None
    assert up["current"] == up["head"]
    down = one_document(run_cli("db", "downgrade", "--url", url, "--json"), "caravel db downgrade")
    assert down["previous"] == up["head"]
    assert down["current"] not in (None, up["head"])
    base = one_document(
        run_cli("db", "downgrade", "base", "--url", url, "--json"), "caravel db downgrade"
    )
    assert (base["previous"], base["current"]) == (down["current"], None)


@pytest.mark.parametrize("command", ["current", "check"])
def test_db(sqlite_seeded: str, command: str) -> None:
    found = one_document(
        run_cli("db", command, "--url", sqlite_seeded, "--json"), f"caravel db {command}"
    )
    assert found["current"] == found["head"]


def test_queues(seeded: str) -> None:
    paused = one_document(
        run_cli("queues", "pause", "docs", "--url", seeded, "--json"), "caravel queues pause"
    )
    assert paused == {"queue": "docs", "paused": True, "changed": True}
    listed = one_document(
        run_cli("queues", "list", "--url", seeded, "--json"), "caravel queues list"
    )
    (row,) = listed["queues"]
    assert (row["queue"], row["paused"]) == ("docs", True)
    assert row["paused_at"] is not None
    resumed = one_document(
        run_cli("queues", "resume", "docs", "--url", seeded, "--json"), "caravel queues resume"
    )
    assert resumed == {"queue": "docs", "paused": False, "changed": True}


def test_queue_limits(seeded: str) -> None:
    args = ["--per-key", "2", "--fair", "--weight", "acme=3", "--url", seeded, "--json"]
    limited = one_document(
        run_cli("queues", "limits", "set", "docs", *args),
        "caravel queues limits set",
    )
    assert limited == {
        "queue": "docs",
        "concurrency": None,
        "per_key": 2,
        "rate": None,
        "rate_per_key": None,
        "period_ms": None,
        "fair": True,
        "weights": {"acme": 3},
    }
    rated = one_document(
        run_cli(
            "queues",
            "limits",
            "set",
            "docs",
            "--rate",
            "20",
            "--period",
            "60",
            "--url",
            seeded,
            "--json",
        ),
        "caravel queues limits set",
    )
    # The rate is its own kind: the per-key cap and the fairness stay.
    assert (rated["per_key"], rated["rate"], rated["period_ms"]) == (2, 20, 60_000)
    assert (rated["fair"], rated["weights"]) == (True, {"acme": 3})
    shown = one_document(
        run_cli("queues", "limits", "show", "--url", seeded, "--json"), "caravel queues limits show"
    )
    (row,) = shown["limits"]
    assert (row["queue"], row["concurrency"], row["per_key"]) == ("docs", None, 2)
    assert (row["rate"], row["rate_per_key"], row["period_ms"]) == (20, None, 60_000)
    assert (row["fair"], row["weights"]) == (True, {"acme": 3})
    # One job runs and one is ready, both of the seed's tenant: the key's cap of two leaves room.
    assert (row["running"], row["waiting"]) == (1, 0)
    assert [(k["running"], k["waiting"]) for k in row["keys"]] == [(1, 0)]
    status = one_document(run_cli("status", "--url", seeded, "--json"), "caravel status")
    (counted,) = status["queues"]
    # The rate was set after the seed's job started: nothing used in its window.
    assert counted["limits"] == {
        "concurrency": {"limit": None, "per_key": 2, "running": 1, "waiting": 0},
        "rate": {"limit": 20, "per_key": None, "period_ms": 60_000, "used": 0},
        "fair": {"weights": {"acme": 3}},
    }
    one_document(
        run_cli("queues", "limits", "set", "docs", "--concurrency", "1", "--url", seeded, "--json"),
        "caravel queues limits set",
    )
    status = one_document(run_cli("status", "--url", seeded, "--json"), "caravel status")
    assert status["queues"][0]["limits"]["fair"] is None
    assert status["queues"][0]["limits"]["concurrency"] == {
        "limit": 1,
        "per_key": None,
        "running": 1,
        "waiting": 1,
    }
    shown = one_document(
        run_cli("queues", "limits", "show", "--keys", "0", "--url", seeded, "--json"),
        "caravel queues limits show",
    )
    assert shown["limits"][0]["keys"] == []
    assert (shown["limits"][0]["fair"], shown["limits"][0]["weights"]) == (False, {})
    cleared = one_document(
        run_cli("queues", "limits", "clear", "docs", "--url", seeded, "--json"),
        "caravel queues limits clear",
    )
    assert cleared == {"queue": "docs", "changed": True}


def test_schedules(seeded: str) -> None:
    paused = one_document(
        run_cli("schedules", "pause", "heartbeat", "--url", seeded, "--json"),
        "caravel schedules pause",
    )
    assert paused == {"schedule": "heartbeat", "paused": True, "changed": True}
    app = "tests.support.apps.scheduled:registry"
    listed = one_document(
        run_cli("schedules", "list", "--url", seeded, "--app", app, "--json"),
        "caravel schedules list",
    )
    assert [(r["name"], r["paused"]) for r in listed["schedules"]] == [
        ("heartbeat", True),
        ("nightly-digest", False),
    ]
    resumed = one_document(
        run_cli("schedules", "resume", "heartbeat", "--url", seeded, "--json"),
        "caravel schedules resume",
    )
    assert resumed == {"schedule": "heartbeat", "paused": False, "changed": True}


async def _link(url: str) -> tuple[str, str]:
    """A batch of two jobs with a callback, and a chain of two steps: their ids."""
    async with open_queue(url) as queue:
        batch = await queue.enqueue_batch(
            [(Add(1), dispatch(queue="docs")), (Add(2), dispatch(queue="docs"))],
            callback=(Add(3), dispatch(queue="docs")),
        )
        chain = await queue.enqueue_chain(
            [(Add(4), dispatch(queue="docs")), (Add(5), dispatch(queue="docs"))]
        )
    return str(batch.batch_id), str(chain.chain_id)


def test_batches_and_chains(seeded: str) -> None:
    batch_id, chain_id = asyncio.run(_link(seeded))
    listed = one_document(
        run_cli("batches", "list", "--url", seeded, "--json"), "caravel batches list"
    )
    assert [b["batch_id"] for b in listed["batches"]] == [batch_id]
    shown = one_document(
        run_cli("batches", "show", batch_id, "--url", seeded, "--json"), "caravel batches show"
    )
    assert shown == listed["batches"][0]
    chain = one_document(
        run_cli("chains", "show", chain_id, "--url", seeded, "--json"), "caravel chains show"
    )
    assert [s["state"] for s in chain["steps"]] == ["ready", "held"]


def test_workflows(tmp_path: Path, sqlite_template: SqliteTemplate) -> None:
    url = sqlite_template.copy_to(tmp_path / "queue.db")
    made = asyncio.run(make_workflow(url))
    ident = str(made.workflow_id)
    listed = one_document(
        run_cli("workflows", "list", "--url", url, "--json"), "caravel workflows list"
    )
    assert [w["workflow_id"] for w in listed["workflows"]] == [ident]
    shown = one_document(
        run_cli("workflows", "show", ident, "--url", url, "--json"), "caravel workflows show"
    )
    assert {s["step"] for s in shown["steps"]} == {"fetch", "resize", "merge", "approve", "publish"}
    sent = one_document(
        run_cli("workflows", "signal", ident, "approved", "--url", url, "--json"),
        "caravel workflows signal",
    )
    assert sent["recorded"] is True
    cancelled = one_document(
        run_cli("workflows", "cancel", ident, "--url", url, "--yes", "--json"),
        "caravel workflows cancel",
    )
    assert cancelled["changed"] > 0


def test_workers(sqlite_seeded: str, tmp_path: Path) -> None:
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    worker = WorkerProcess(sqlite_seeded, evidence, ["nothing-here"], "--heartbeat-interval", "1")
    try:

        def registered() -> bool:
            done = run_cli("workers", "--url", sqlite_seeded, "--json")
            return done.returncode == 0 and bool(json.loads(done.stdout)["workers"])

        wait_until(registered, what="the worker to register")
        done = run_cli("workers", "--url", sqlite_seeded, "--json", "--lost-after", "30")
        found = one_document(done, "caravel workers")
        assert found["lost_after_seconds"] == 30
        (row,) = found["workers"]
        assert (row["pid"], row["queues"], row["state"]) == (
            worker.process.pid,
            ["nothing-here"],
            "running",
        )
        worker.signal(signal.SIGTERM)
        assert worker.wait()[0] == 0
    finally:
        worker.kill()


# ----- errors -----------------------------------------------------------------------------


def error_of(done: subprocess.CompletedProcess[str], code: int) -> dict[str, Any]:
    """Exit ``code``, nothing on stdout, one line of JSON on stderr in the documented shape."""
    assert done.returncode == code, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    found = json.loads(lines[0])
    same_shape(EXAMPLES["Errors"], found)
    error: dict[str, Any] = found["error"]
    assert error["exit_code"] == code
    return error


@pytest.mark.parametrize("command", JSON_COMMANDS)
def test_an_error_under_json_is_the_text_line_as_json(tmp_path: Path, command: str) -> None:
    missing = tmp_path / "nowhere" / "queue.db"
    args = [*command.split()[1:], "--url", f"sqlite:///{missing}"]
    if command in ("caravel jobs show", "caravel jobs replay"):
        args += ["6f1c8f3e-0b7e-4a43-9a2e-1a2b3c4d5e6f", "-q", "q", "-t", "t"]
    if command in ("caravel batches show", "caravel chains show", "caravel workflows show"):
        args.append("6f1c8f3e-0b7e-4a43-9a2e-1a2b3c4d5e6f")
    if command == "caravel workflows cancel":
        args += ["6f1c8f3e-0b7e-4a43-9a2e-1a2b3c4d5e6f", "--yes"]
    if command == "caravel workflows signal":
        args += ["6f1c8f3e-0b7e-4a43-9a2e-1a2b3c4d5e6f", "approved"]
    if command in ("caravel queues pause", "caravel queues resume"):
        args.append("reports")
    if command == "caravel queues limits set":
        args += ["reports", "--concurrency", "2"]
    if command == "caravel queues limits clear":
        args.append("reports")
    if command in ("caravel schedules pause", "caravel schedules resume"):
        args.append("nightly")
    if command == "caravel schedules list":
        args += ["--app", "tests.support.apps.scheduled:registry"]
    if command in ("caravel jobs cancel", "caravel jobs delete"):
        args += ["-q", "q", "--yes"]
    if command == "caravel outbox relay":
        args += ["--app-url", "sqlite:///app.db", "--app", "tests.faults.effects_app:registry"]
        args += ["--once"]
    if command in ("caravel db current", "caravel db upgrade", "caravel db downgrade"):
        # current of a missing file is none; an upgrade creates one.
        args = [*command.split()[1:], "--url", "sqlite://nope.db"]
    text = run_cli(*args)
    as_json = run_cli(*args, "--json")
    error = error_of(as_json, text.returncode)
    assert text.returncode == 2
    assert error["message"] == text.stderr.strip()
    assert error["message"].startswith(command + ": ")
    assert error["type"] in ("DatabaseNotFoundError", "ValidationError")


def test_a_lookup_that_finds_nothing_exits_one(sqlite_seeded: str) -> None:
    args = ("jobs", "show", "6f1c8f3e-0b7e-4a43-9a2e-1a2b3c4d5e6f", "--url", sqlite_seeded)
    error = error_of(run_cli(*args, "-q", "docs", "-t", "tenant-a", "--json"), 1)
    assert error == {
        "type": "JobNotFoundError",
        "message": "caravel jobs show: no such job in this queue and tenant",
        "exit_code": 1,
    }


@pytest.mark.parametrize(
    ("args", "type_name"),
    [
        (["status", "--nope"], "NoSuchOption"),
        (["jobs", "list", "--limit", "many"], "BadParameter"),
        (["jobs", "show", "--url", "sqlite:///q.db"], "MissingParameter"),
    ],
)
def test_a_usage_error_under_json_is_json_too(args: list[str], type_name: str) -> None:
    error = error_of(run_cli(*args, "--json"), 2)
    assert error["type"] == type_name
    assert error["message"].startswith("caravel ")


# ----- the worker sample ------------------------------------------------------------------


def test_the_worker_sample_prints_the_same_convention(tmp_path: Path) -> None:
    # This tree's own library, not whatever copy is installed.
    path = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    env = {**os.environ, "CARAVEL_WORKER_DIRECTORY": str(tmp_path), "PYTHONPATH": path}

    def run(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "caravel_samples.worker", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def sample(*args: str) -> dict[str, Any]:
        (line,) = run(*args).splitlines()
        found: dict[str, Any] = json.loads(line)
        conventional(found)
        return found

    run("migrate")  # text, not JSON
    enqueued = sample("enqueue-demo")["jobs"]
    assert [set(job) for job in enqueued] == [{"job_id", "already_enqueued"}] * 3
    again = sample("enqueue-demo")["jobs"]
    assert again == [{**job, "already_enqueued": True} for job in enqueued]
    counts = sample("queue-status")
    same_shape(EXAMPLES["caravel status"], counts)
    assert counts["queues"][0]["oldest_ready_due_at"] is not None
    assert sample("work-once") == {"claimed": True}
    assert sample("report")["events"] == 1


async def _completed_with_result(url: str) -> str:
    async with open_queue(url, clock=ManualClock()) as queue:
        accepted = await queue.enqueue(Add(5), dispatch(queue="docs"))
        leases = Leases(queue)
        claimed = await leases.claim("docs")
        assert claimed is not None
        from caravel.worker.leases import Acknowledgement

        assert await leases.record([Acknowledgement(claimed.lease, result='{"pages":[1,2]}')])
        return str(accepted.job_id)


def test_jobs_show_prints_the_result_only_when_asked(
    tmp_path: Path, sqlite_template: SqliteTemplate
) -> None:
    url = sqlite_template.copy_to(tmp_path / "queue.db")
    job_id = asyncio.run(_completed_with_result(url))
    where = ("--url", url, "-q", "docs", "-t", "tenant-a")
    plain = one_document(run_cli("jobs", "show", "--json", job_id, *where), "caravel jobs show")
    assert plain["result"] is None
    assert (plain["state"], plain["error_class"], plain["snoozes"]) == ("completed", None, 0)
    shown = one_document(
        run_cli("jobs", "show", "--json", job_id, *where, "--result"), "caravel jobs show"
    )
    assert shown["result"] == {"pages": [1, 2]}
    assert shown["payload"] is None


async def _pending(url: str) -> str:
    async with open_queue(url, clock=ManualClock()) as queue:
        accepted = await queue.enqueue(Add(5), dispatch(queue="docs", pending_key="render:7"))
        return str(accepted.job_id)


async def _reported(url: str) -> str:
    """A job whose handler reported progress and metadata, then completed."""
    from caravel.store.protocol import ProgressUpdate

    async with open_queue(url, clock=ManualClock()) as queue:
        accepted = await queue.enqueue(Add(5), dispatch(queue="docs"))
        leases = Leases(queue)
        claimed = await leases.claim("docs")
        assert claimed is not None
        report = ProgressUpdate(
            claimed.lease,
            queue.clock.now_ms(),
            '{"done":4,"total":5,"note":"rendering"}',
            '{"pages":[1,2],"source":"s3"}',
        )
        assert await queue.store.job_set_progress(report)
        await leases.complete(claimed.lease)
        return str(accepted.job_id)


def test_jobs_show_and_list_print_progress_and_meta(
    tmp_path: Path, sqlite_template: SqliteTemplate
) -> None:
    url = sqlite_template.copy_to(tmp_path / "queue.db")
    job_id = asyncio.run(_reported(url))
    where = ("--url", url, "-q", "docs", "-t", "tenant-a")
    shown = one_document(run_cli("jobs", "show", "--json", job_id, *where), "caravel jobs show")
    assert shown["state"] == "completed"
    progress = shown["progress"]
    assert (progress["done"], progress["total"], progress["note"]) == (4, 5, "rendering")
    assert TIMESTAMP.match(progress["updated_at"])
    assert shown["meta"] == {"pages": [1, 2], "source": "s3"}
    listed = one_document(run_cli("jobs", "list", "--url", url, "--json"), "caravel jobs list")
    assert [(job["progress"], job["meta"]) for job in listed["jobs"]] == [(progress, shown["meta"])]


def test_jobs_show_and_list_print_the_pending_key(
    tmp_path: Path, sqlite_template: SqliteTemplate
) -> None:
    url = sqlite_template.copy_to(tmp_path / "queue.db")
    job_id = asyncio.run(_pending(url))
    where = ("--url", url, "-q", "docs", "-t", "tenant-a")
    shown = one_document(run_cli("jobs", "show", "--json", job_id, *where), "caravel jobs show")
    assert shown["pending_key"] == "render:7"
    listed = one_document(run_cli("jobs", "list", "--url", url, "--json"), "caravel jobs list")
    assert [job["pending_key"] for job in listed["jobs"]] == ["render:7"]
