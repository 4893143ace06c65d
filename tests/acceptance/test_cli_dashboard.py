"""``caravel dashboard`` as a real process: it refuses addresses other machines can reach unless
told otherwise, refuses an unmigrated queue, and serves the dashboard on loopback."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

import httpx
import pytest

from caravel import DatabaseQueue, DispatchOptions
from tests.support.dashboard.seed import SendEmail, registry, seed
from tests.support.databases import SqliteTemplate
from tests.support.processes import CARAVEL, PYTHONPATH, ROOT, run_cli, wait_until

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.parametrize(
    ("bind", "message"),
    [
        ("0.0.0.0:8765", "refusing to listen on 0.0.0.0"),
        ("[::]:8765", "refusing to listen on ::"),
        ("192.0.2.10:8765", "refusing to listen on 192.0.2.10"),
        ("example.com:8765", "--bind the host must be an IP address or localhost"),
        ("127.0.0.1", "--bind must look like 127.0.0.1:8765"),
        ("127.0.0.1:0", "--bind the port must be from 1 to 65535"),
    ],
)
def test_refuses_addresses_other_machines_can_reach(
    tmp_path: Path, bind: str, message: str
) -> None:
    result = run_cli("dashboard", "--url", f"sqlite:///{tmp_path / 'q.db'}", "--bind", bind)
    assert result.returncode == 2
    assert message in result.stderr


def test_refuses_an_unmigrated_queue(tmp_path: Path) -> None:
    (tmp_path / "empty.db").touch()  # a database, but not a migrated queue
    result = run_cli("dashboard", "--url", f"sqlite:///{tmp_path / 'empty.db'}")
    assert result.returncode == 2
    assert "no queue migration has been applied" in result.stderr


def test_refuses_a_database_file_that_does_not_exist(tmp_path: Path) -> None:
    result = run_cli("dashboard", "--url", f"sqlite:///{tmp_path / 'missing.db'}")
    assert result.returncode == 2
    assert f"there is no SQLite database file at {tmp_path / 'missing.db'}" in result.stderr


def _serve(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [CARAVEL, "dashboard", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": PYTHONPATH, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _up(base: str) -> bool:
    try:
        httpx.get(base + "/static/dashboard.css", timeout=1)
    except httpx.HTTPError:
        return False
    return True


def _stop(process: subprocess.Popen[str]) -> tuple[int, str]:
    process.send_signal(signal.SIGINT)
    try:
        _, err = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = process.communicate()
    return process.returncode, err


async def test_serves_the_dashboard_to_this_machine_only(db_url: str) -> None:
    seeded = await seed(db_url, small=True)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    process = _serve("--url", db_url, "--bind", f"127.0.0.1:{port}", "--refresh", "0")
    try:
        wait_until(lambda: _up(base) or process.poll() is not None, what="the dashboard")
        assert process.poll() is None
        async with httpx.AsyncClient(base_url=base) as client:
            page = await client.get("/")
            assert page.status_code == 200
            assert "local operator" in page.text
            # The seeded jobs are in the real past, so the counts show, the charts are empty.
            assert f'data-count="dead_letter">{seeded.total("dead_letter")}<' in page.text
            refused = await client.get("/", headers={"host": "attacker.example"})
            assert refused.status_code == 403
            assert "answers only local requests" in refused.text
            proxied = await client.get("/", headers={"x-forwarded-for": "203.0.113.5"})
            assert proxied.status_code == 403
    finally:
        code, err = _stop(process)
    assert code == 0, err
    assert f"serving http://127.0.0.1:{port}/ (requests from this machine only)" in err


async def test_authorize_names_a_function_of_the_operator(db_url: str) -> None:
    await seed(db_url, small=True)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    process = _serve(
        "--url",
        db_url,
        "--bind",
        f"127.0.0.1:{port}",
        "--authorize",
        "tests.support.dashboard.fixtures:authorize",
    )
    try:
        wait_until(lambda: _up(base) or process.poll() is not None, what="the dashboard")
        async with httpx.AsyncClient(base_url=base) as client:
            assert (await client.get("/")).status_code == 401
            reader = await client.get("/", headers={"x-test-user": "reader"})
            assert reader.status_code == 200
            assert "rita@example.com" in reader.text
            assert (
                await client.get("/workers", headers={"x-test-user": "outsider"})
            ).status_code == 403
    finally:
        code, err = _stop(process)
    assert code == 0, err
    assert "requests decided by tests.support.dashboard.fixtures:authorize" in err


def test_a_bad_authorize_path_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    for value, message in (
        ("nocolon", "must look like package.module:function"),
        ("no.such.module:f", "could not be imported"),
        ("tests.support.dashboard.seed:QUEUES", "is not a function"),
    ):
        result = run_cli("dashboard", "--url", url, "--authorize", value)
        assert result.returncode == 2, value
        assert message in result.stderr, value


def test_a_port_already_in_use_is_one_line_naming_it_and_exit_1(
    sqlite_template: SqliteTemplate, tmp_path: Path
) -> None:
    url = sqlite_template.copy_to(tmp_path / "queue.db")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = run_cli("dashboard", "--url", url, "--bind", f"127.0.0.1:{port}")
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == [
        f"caravel dashboard: port {port} on 127.0.0.1 is already in use; stop what holds it "
        f"or choose another with --bind, e.g. --bind 127.0.0.1:{port % 65535 + 1}"
    ]


async def test_read_url_serves_the_pages_from_the_read_database(
    sqlite_template: SqliteTemplate, tmp_path: Path
) -> None:
    """Two separate queue files: the pages show the one ``--read-url`` names (here given by
    its environment variable), not ``--url``'s."""
    primary = sqlite_template.copy_to(tmp_path / "primary.db")
    read = sqlite_template.copy_to(tmp_path / "read.db")
    async with DatabaseQueue(read, registry) as queue:
        await queue.enqueue(SendEmail("a@example.com", "welcome"), DispatchOptions(queue="copy"))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    process = _serve(
        "--url", primary, "--bind", f"127.0.0.1:{port}", env={"CARAVEL_READ_DATABASE_URL": read}
    )
    try:
        wait_until(lambda: _up(base) or process.poll() is not None, what="the dashboard")
        assert process.poll() is None, process.communicate()[1]
        async with httpx.AsyncClient(base_url=base) as client:
            page = await client.get("/")
        assert page.status_code == 200
        assert 'data-queue="copy"' in page.text
    finally:
        code, err = _stop(process)
    assert code == 0, err


def test_an_unmigrated_read_url_is_refused(sqlite_template: SqliteTemplate, tmp_path: Path) -> None:
    primary = sqlite_template.copy_to(tmp_path / "primary.db")
    (tmp_path / "empty.db").touch()
    result = run_cli("dashboard", "--url", primary, "--read-url", f"sqlite:///{tmp_path}/empty.db")
    assert result.returncode == 2
    assert "no queue migration has been applied" in result.stderr
    missing = run_cli("dashboard", "--url", primary, "--read-url", f"sqlite:///{tmp_path}/no.db")
    assert missing.returncode == 2
    assert f"there is no SQLite database file at {tmp_path / 'no.db'}" in missing.stderr
