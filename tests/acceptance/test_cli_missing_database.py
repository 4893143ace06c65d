"""A SQLite URL whose file does not exist: every command says so with the absolute path, exit 2
(a configuration error, docs/reference/cli.md),
and never advises `caravel db upgrade` (which would create an empty database in the wrong
place). An in-memory URL cannot be migrated. A URL naming a file that is no database, a
directory, or a file in a directory that does not exist: one line saying so, with the next
step, exit 1."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.processes import run_cli

pytestmark = pytest.mark.slow


WORKER = ["worker", "--app", "tests.faults.effects_app:registry", "--queue", "effects"]


@pytest.mark.parametrize(
    ("command", "code"),
    [
        (["status"], 2),
        (["jobs", "list"], 2),
        (["jobs", "show", "6f1c8f3e-0b7e-4a43-9a2e-1a2b3c4d5e6f", "-q", "q", "-t", "t"], 2),
        (["workers"], 2),
        (["metrics"], 2),
        (["metrics", "--serve", "--bind", "127.0.0.1:1"], 2),
        (WORKER, 2),
        (["db", "check"], 2),
    ],
    ids=lambda value: " ".join(value[:2]) if isinstance(value, list) else str(value),
)
def test_a_missing_file_is_named_with_its_absolute_path(
    tmp_path: Path, command: list[str], code: int
) -> None:
    missing = tmp_path / "nowhere" / "queue.db"
    done = run_cli(*command, "--url", f"sqlite:///{missing}")
    assert done.returncode == code, done.stderr
    assert f"there is no SQLite database file at {missing}" in done.stderr
    assert "db upgrade" not in done.stderr
    assert "Traceback" not in done.stderr
    assert not missing.exists()


def test_a_relative_path_is_shown_as_the_absolute_path_it_names(tmp_path: Path) -> None:
    done = run_cli("status", "--url", "sqlite:///not-here.db")
    assert done.returncode == 2
    assert "there is no SQLite database file at /" in done.stderr
    assert "not-here.db" in done.stderr


def test_an_in_memory_database_cannot_be_migrated() -> None:
    done = run_cli("db", "upgrade", "--url", "sqlite:///:memory:")
    assert done.returncode == 2
    assert "url: must name a database file" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["db", "upgrade"],
        ["db", "downgrade"],
        ["db", "check"],
        ["status"],
        ["jobs", "list"],
        WORKER,
    ],
)
def test_the_memory_store_is_refused_by_every_command(command: list[str]) -> None:
    done = run_cli(*command, "--url", "memory://")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr  # one line
    assert "memory:// store lives inside one process" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["db", "upgrade", "--url", "sqlite://nope.db"], "url: a SQLite URL takes three slashes"),
        (["db", "upgrade", "--url", "{file}", "9999"], "revision: '9999' is not a queue migration"),
        (["db", "downgrade", "--url", "{file}", "zzz"], "revision: 'zzz' is not a queue migration"),
    ],
    ids=["two-slashes", "unknown-upgrade", "unknown-downgrade"],
)
def test_a_typo_is_one_line_and_exit_two(tmp_path: Path, args: list[str], expected: str) -> None:
    queue = tmp_path / "queue.db"
    done = run_cli(*(arg.replace("{file}", f"sqlite:///{queue}") for arg in args))
    assert done.returncode == 2, done.stderr
    assert expected in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr


OPENING = [["status"], ["jobs", "list"], ["queues", "pause", "reports"], ["db", "upgrade"], WORKER]


def _could_not_open(done: subprocess.CompletedProcess[str], command: list[str], path: Path) -> str:
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.splitlines()
    assert "Traceback" not in done.stderr
    prefix = f"caravel {' '.join(command[:2]) if command[0] != 'worker' else 'worker'}: "
    assert line.startswith(f"{prefix}could not open the queue database at {path}: "), line
    return line


@pytest.mark.parametrize("command", OPENING, ids=lambda value: " ".join(value[:2]))
def test_a_file_that_is_not_a_database_is_named(tmp_path: Path, command: list[str]) -> None:
    path = tmp_path / "notes.db"
    path.write_text("these are notes, not a database\n", encoding="utf-8")
    line = _could_not_open(run_cli(*command, "--url", f"sqlite:///{path}"), command, path)
    assert line.endswith("it is not a SQLite database; check that the URL names the right file"), (
        line
    )
    assert path.read_text(encoding="utf-8") == "these are notes, not a database\n"


@pytest.mark.parametrize("command", OPENING, ids=lambda value: " ".join(value[:2]))
def test_a_directory_is_named_with_a_file_to_use_instead(
    tmp_path: Path, command: list[str]
) -> None:
    line = _could_not_open(run_cli(*command, "--url", f"sqlite:///{tmp_path}"), command, tmp_path)
    assert line.endswith(
        f"it is a directory; name a database file inside it, such as sqlite:///{tmp_path}/queue.db"
    ), line


def test_upgrade_into_a_directory_that_does_not_exist_says_to_create_it(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "queue.db"
    done = run_cli("db", "upgrade", "--url", f"sqlite:///{missing}")
    line = _could_not_open(done, ["db", "upgrade"], missing)
    assert line.endswith(
        f"the directory {missing.parent} does not exist; create it (mkdir -p "
        f"{missing.parent}) or fix the path in the URL"
    ), line
    assert not missing.parent.exists()
