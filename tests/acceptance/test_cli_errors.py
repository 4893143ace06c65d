"""What the command line says when it cannot open a PostgreSQL queue database: one line naming
what it could not do (open the queue database, at the URL with its password masked), what the
server said and the next step; exit code 1, no traceback. Every command, the worker and the
dashboard included."""

from __future__ import annotations

import json
import socket

import pytest
from sqlalchemy.engine import make_url

from tests.support.databases import ADMIN_URL
from tests.support.processes import run_cli

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

SECRET = "s3cret-pw"
JOB_ID = "6f1c8f3e-0b7e-4a43-9a2e-1a2b3c4d5e6f"
WORKER = ["worker", "--app", "tests.support.apps.workload:registry", "-q", "q"]
#: Every command that opens the queue database, with what it needs besides --url.
COMMANDS = [
    ["status"],
    ["workers"],
    ["jobs", "list"],
    ["jobs", "show", JOB_ID],
    ["jobs", "replay", JOB_ID],
    ["jobs", "replay-dead", "--yes"],
    ["jobs", "cancel", JOB_ID, "-q", "q"],
    ["jobs", "delete", JOB_ID, "-q", "q"],
    ["jobs", "prune", "--completed", "7d", "--yes"],
    ["queues", "list"],
    ["queues", "pause", "reports"],
    ["schedules", "pause", "nightly"],
    ["batches", "list"],
    ["chains", "show", JOB_ID],
    ["db", "upgrade"],
    ["db", "current"],
    ["db", "check"],
    WORKER,
    ["dashboard"],  # the database is opened before the address is bound
    ["metrics", "--format", "prometheus"],  # JSON, the default, would print its error as JSON
    ["metrics", "--serve"],
    [
        "outbox",
        "relay",
        "--app-url",
        "sqlite:///unused.db",
        "--app",
        "tests.faults.effects_app:registry",
        "--once",
    ],
]


def _name(args: list[str]) -> str:
    return " ".join(word for word in args[:2] if not word.startswith("-") and word != JOB_ID)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def _url(**parts: object) -> str:
    return make_url(ADMIN_URL).set(password=SECRET, **parts).render_as_string(False)


def _one_line(done: object, command: list[str]) -> str:
    stderr: str = done.stderr  # type: ignore[attr-defined]
    assert done.returncode == 1, stderr  # type: ignore[attr-defined]
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    assert SECRET not in stderr
    prefix = f"caravel {_name(command)}: "
    assert lines[0].startswith(prefix), lines[0]
    return lines[0]


@pytest.mark.parametrize("command", COMMANDS, ids=_name)
def test_a_server_that_does_not_answer_is_one_line_with_the_next_step(
    command: list[str],
) -> None:
    port = _free_port()
    url = _url(host="127.0.0.1", port=port)
    line = _one_line(run_cli(*command, "--url", url), command)
    shown = make_url(url).render_as_string(hide_password=True)
    assert "***" in shown
    assert f"could not open the queue database at {shown}: " in line
    assert f'connection to server at "127.0.0.1", port {port} failed: Connection refused' in line
    assert line.endswith("check that the server is running and the URL's host and port are right")


@pytest.mark.parametrize(
    "command", [["status"], ["db", "upgrade"], ["jobs", "replay", JOB_ID], WORKER], ids=_name
)
def test_a_missing_database_says_how_to_create_it(command: list[str]) -> None:
    name = "caravel_no_such_database"
    url = _url(database=name)
    line = _one_line(run_cli(*command, "--url", url), command)
    admin = make_url(ADMIN_URL)
    createdb = f"createdb -h {admin.host} -p {admin.port or 5432} -U {admin.username} {name}"
    assert line.endswith(
        f'database "{name}" does not exist; create it ({createdb}), then run `caravel db upgrade`'
    ), line


def test_a_role_the_server_does_not_know_is_named() -> None:
    url = _url(username="caravel_no_such_role")
    line = _one_line(run_cli("status", "--url", url), ["status"])
    assert line.endswith(
        'the server has no role "caravel_no_such_role"; check the user name in the URL'
    )


@pytest.mark.parametrize(
    "command",
    [["status"], ["jobs", "list"], ["workers"], ["db", "check"], ["queues", "pause", "x"]],
)
def test_under_json_a_refused_connection_is_the_json_error_exit_one(command: list[str]) -> None:
    port = _free_port()
    url = _url(host="127.0.0.1", port=port)
    text = run_cli(*command, "--url", url)
    done = run_cli(*command, "--url", url, "--json")
    assert done.returncode == text.returncode == 1
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    error = json.loads(line)["error"]
    assert error == {"type": "StoreError", "message": text.stderr.strip(), "exit_code": 1}
    assert "could not open the queue database" in error["message"]
    assert SECRET not in line
