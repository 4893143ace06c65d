"""``caravel db ...`` as an operator runs it: the installed console script, in a subprocess."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from caravel import migrate
from tests.support import Add, dispatch, open_queue
from tests.support.databases import create_pg_database, drop_pg_database, sqlite_url

pytestmark = pytest.mark.slow  # every test runs the console script in a subprocess

BIN_DIR = Path(sys.executable).parent
UPGRADE_HINT = "caravel db upgrade"


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str

    @property
    def flat_stderr(self) -> str:
        """stderr with the console's line wrapping undone."""
        return " ".join(self.stderr.split())


@pytest.fixture(scope="module")
def caravel_script() -> str:
    """The ``caravel`` script installed next to this interpreter (the venv's own)."""
    found = shutil.which("caravel", path=str(BIN_DIR))
    assert found is not None, f"no caravel console script in {BIN_DIR}; pip install -e ."
    assert os.path.samefile(Path(found).parent, BIN_DIR)
    return found


@pytest.fixture
def cli(caravel_script: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    def run(*args: str, env: dict[str, str] | None = None) -> Run:
        environment = {k: v for k, v in os.environ.items() if k != "CARAVEL_DATABASE_URL"}
        environment.update({"NO_COLOR": "1", "TERM": "dumb"})
        environment.update(env or {})
        done = subprocess.run(
            [caravel_script, *args],
            capture_output=True,
            text=True,
            env=environment,
            cwd=tmp_path,
            timeout=120,
            check=False,
        )
        return Run(done.returncode, done.stdout, done.stderr)

    return run


@pytest.fixture
def empty_file(tmp_path: Path) -> str:
    path = tmp_path / "queue.db"
    path.touch()
    return sqlite_url(path)


@pytest.fixture
def pg_empty_url() -> Iterator[str]:
    url = create_pg_database("caravel_cli")
    try:
        yield url
    finally:
        drop_pg_database(url)


def _tables(url: str) -> set[str]:
    parsed = make_url(url)
    driver = (
        "postgresql+psycopg" if parsed.get_backend_name() == "postgresql" else "sqlite+pysqlite"
    )
    engine = sa.create_engine(parsed.set(drivername=driver), poolclass=sa.pool.NullPool)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


# ----- SQLite ------------------------------------------------------------------------------


def test_upgrade_then_check_exits_zero(cli, empty_file: str) -> None:  # type: ignore[no-untyped-def]
    upgraded = cli("db", "upgrade", "--url", empty_file)
    assert upgraded.code == 0, upgraded.stderr
    assert migrate.head() in upgraded.stdout
    assert "caravel_jobs" in _tables(empty_file)

    checked = cli("db", "check", "--url", empty_file)
    assert checked.code == 0, checked.stderr
    assert "up to date" in checked.stdout
    assert checked.stderr == ""


def test_check_on_an_empty_file_exits_two_and_says_to_upgrade(cli, empty_file: str) -> None:  # type: ignore[no-untyped-def]
    checked = cli("db", "check", "--url", empty_file)
    assert checked.code == 2  # not migrated: configuration
    assert len(checked.stderr.strip().splitlines()) == 1, checked.stderr
    assert UPGRADE_HINT in checked.flat_stderr
    assert "Traceback" not in checked.stderr
    assert checked.stdout == ""
    assert _tables(empty_file) == set()  # check created nothing


def test_check_json_on_an_empty_file(cli, empty_file: str) -> None:  # type: ignore[no-untyped-def]
    checked = cli("db", "check", "--json", "--url", empty_file)
    assert checked.code == 2
    assert checked.stdout == ""
    (line,) = checked.stderr.strip().splitlines()
    error = json.loads(line)["error"]
    assert error["type"] == "SchemaNotReadyError"
    assert error["exit_code"] == 2
    assert error["message"].startswith("caravel db check: the queue schema is not ready")
    assert UPGRADE_HINT in error["message"]


def test_check_json_after_upgrade(cli, empty_file: str) -> None:  # type: ignore[no-untyped-def]
    assert cli("db", "upgrade", "--url", empty_file).code == 0
    checked = cli("db", "check", "--json", "--url", empty_file)
    assert checked.code == 0
    assert json.loads(checked.stdout) == {"current": migrate.head(), "head": migrate.head()}


def test_current_json_prints_the_revision(cli, empty_file: str) -> None:  # type: ignore[no-untyped-def]
    before = cli("db", "current", "--json", "--url", empty_file)
    assert before.code == 0, before.stderr
    assert json.loads(before.stdout) == {"current": None, "head": migrate.head()}

    assert cli("db", "upgrade", "--url", empty_file).code == 0

    after = cli("db", "current", "--json", "--url", empty_file)
    assert after.code == 0, after.stderr
    assert json.loads(after.stdout) == {"current": migrate.head(), "head": migrate.head()}

    plain = cli("db", "current", "--url", empty_file)
    assert plain.stdout.strip() == migrate.head()


def test_database_url_from_the_environment(cli, empty_file: str) -> None:  # type: ignore[no-untyped-def]
    env = {"CARAVEL_DATABASE_URL": empty_file}

    checked = cli("db", "check", env=env)
    assert checked.code == 2
    assert UPGRADE_HINT in checked.flat_stderr

    assert cli("db", "upgrade", env=env).code == 0
    assert "caravel_jobs" in _tables(empty_file)
    assert cli("db", "check", env=env).code == 0
    current = cli("db", "current", "--json", env=env)
    assert json.loads(current.stdout)["current"] == migrate.head()


def test_url_option_wins_over_the_environment(cli, tmp_path: Path, empty_file: str) -> None:  # type: ignore[no-untyped-def]
    other = sqlite_url(tmp_path / "other.db")
    assert cli("db", "upgrade", "--url", other).code == 0

    checked = cli("db", "check", "--url", other, env={"CARAVEL_DATABASE_URL": empty_file})
    assert checked.code == 0, checked.stderr
    assert _tables(empty_file) == set()


def test_downgrade_to_base_then_check_exits_two(cli, empty_file: str) -> None:  # type: ignore[no-untyped-def]
    assert cli("db", "upgrade", "--url", empty_file).code == 0

    downgraded = cli("db", "downgrade", "--url", empty_file, "base")
    assert downgraded.code == 0, downgraded.stderr
    assert "base" in downgraded.stdout
    assert "caravel_jobs" not in _tables(empty_file)

    checked = cli("db", "check", "--url", empty_file)
    assert checked.code == 2
    assert UPGRADE_HINT in checked.flat_stderr


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def migrated_url(request: pytest.FixtureRequest, empty_file: str) -> Iterator[str]:
    """A queue database at the newest revision, on each database."""
    if request.param == "sqlite":
        migrate.upgrade(empty_file)
        yield empty_file
        return
    url = create_pg_database("caravel_cli")
    try:
        migrate.upgrade(url)
        yield url
    finally:
        drop_pg_database(url)


def _held_step_and_cancelled_job(url: str) -> None:
    async def seed() -> None:
        async with open_queue(url) as queue:
            await queue.enqueue_chain([(Add(1), dispatch()), (Add(2), dispatch())])
            cancelled = await queue.enqueue(Add(3), dispatch("cancelled"))
            await queue.cancel(cancelled.job_id, "default", "tenant-a")

    asyncio.run(seed())


def test_a_downgrade_that_would_lose_rows_refuses_and_force_lists_what_went(  # type: ignore[no-untyped-def]
    cli, migrated_url: str
) -> None:
    _held_step_and_cancelled_job(migrated_url)

    refused = cli("db", "downgrade", "--url", migrated_url, "0005")
    assert refused.code == 2
    assert refused.stdout == ""
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert refused.flat_stderr.startswith(
        "caravel db downgrade: downgrading to 0005 would dead-letter 1 held chain step, "
        "delete 1 cancelled job; nothing changed; run it again with --force"
    )
    assert migrate.current(migrated_url) == migrate.head()

    forced = cli("db", "downgrade", "--url", migrated_url, "0005", "--force")
    assert forced.code == 0, forced.stderr
    assert forced.stdout.splitlines() == [
        "queue schema at 0005",
        "dead-lettered 1 held chain step (0009)",
        "deleted 1 cancelled job (0006)",
    ]
    assert migrate.current(migrated_url) == "0005"


def test_downgrade_json_for_a_refusal_and_for_what_went(cli, migrated_url: str) -> None:  # type: ignore[no-untyped-def]
    _held_step_and_cancelled_job(migrated_url)

    refused = cli("db", "downgrade", "--json", "--url", migrated_url, "base")
    assert refused.code == 2
    (line,) = refused.stderr.strip().splitlines()
    error = json.loads(line)["error"]
    assert error["type"] == "DowngradeRefusedError"
    assert error["exit_code"] == 2
    assert "delete 2 jobs;" in error["message"]  # the chain's two steps; 0006 takes the third

    forced = cli("db", "downgrade", "--json", "--force", "--url", migrated_url, "base")
    assert forced.code == 0, forced.stderr
    assert json.loads(forced.stdout) == {
        "previous": migrate.head(),
        "current": None,
        "head": migrate.head(),
        "losses": [
            {"revision": "0009", "kind": "held_chain_steps", "rows": 1, "fate": "dead_lettered"},
            {"revision": "0006", "kind": "cancelled_jobs", "rows": 1, "fate": "deleted"},
            {"revision": "0001", "kind": "jobs", "rows": 2, "fate": "deleted"},
        ],
    }
    assert "caravel_jobs" not in _tables(migrated_url)


def test_missing_url_is_a_usage_error(cli) -> None:  # type: ignore[no-untyped-def]
    checked = cli("db", "check")
    assert checked.code == 2
    assert "--url" in checked.stderr
    assert "Traceback" not in checked.stderr


# ----- PostgreSQL --------------------------------------------------------------------------


@pytest.mark.postgres
def test_postgresql_upgrade_check_current_downgrade(cli, pg_empty_url: str) -> None:  # type: ignore[no-untyped-def]
    before = cli("db", "check", "--url", pg_empty_url)
    assert before.code == 2
    assert UPGRADE_HINT in before.flat_stderr

    upgraded = cli("db", "upgrade", "--url", pg_empty_url)
    assert upgraded.code == 0, upgraded.stderr
    assert {"caravel_jobs", "caravel_alembic_version"} <= _tables(pg_empty_url)

    checked = cli("db", "check", "--url", pg_empty_url)
    assert checked.code == 0, checked.stderr

    current = cli("db", "current", "--json", "--url", pg_empty_url)
    assert json.loads(current.stdout) == {"current": migrate.head(), "head": migrate.head()}

    assert cli("db", "downgrade", "--url", pg_empty_url, "base").code == 0
    assert "caravel_jobs" not in _tables(pg_empty_url)
    after = cli("db", "check", env={"CARAVEL_DATABASE_URL": pg_empty_url})
    assert after.code == 2
    assert UPGRADE_HINT in after.flat_stderr
