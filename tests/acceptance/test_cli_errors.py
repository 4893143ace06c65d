"""What the command line says when the database cannot be used: one line naming the operation
and the driver's reason, exit code 1, no traceback."""

from __future__ import annotations

import json
import socket

import pytest
from sqlalchemy.engine import make_url

from tests.support.databases import ADMIN_URL
from tests.support.processes import run_cli

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.mark.parametrize("command", [["status"], ["jobs", "list"], ["workers"]])
def test_a_refused_connection_is_one_line_with_its_reason(command: list[str]) -> None:
    port = _free_port()
    url = make_url(ADMIN_URL).set(host="127.0.0.1", port=port).render_as_string(False)
    done = run_cli(*command, "--url", url)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "database error during" in lines[0]
    assert f"port {port}" in lines[0]
    assert "Connection refused" in lines[0]
    assert "Traceback" not in done.stderr


def test_a_missing_database_is_named() -> None:
    url = make_url(ADMIN_URL).set(database="caravel_no_such_database").render_as_string(False)
    done = run_cli("status", "--url", url)
    assert done.returncode == 1
    assert 'database "caravel_no_such_database" does not exist' in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("command", [["status"], ["jobs", "list"], ["workers"], ["db", "check"]])
def test_under_json_a_refused_connection_is_the_json_error_exit_one(command: list[str]) -> None:
    port = _free_port()
    url = make_url(ADMIN_URL).set(host="127.0.0.1", port=port).render_as_string(False)
    text = run_cli(*command, "--url", url)
    done = run_cli(*command, "--url", url, "--json")
    assert done.returncode == text.returncode == 1
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    error = json.loads(line)["error"]
    assert error == {"type": "StoreError", "message": text.stderr.strip(), "exit_code": 1}
    assert f"port {port}" in error["message"]
