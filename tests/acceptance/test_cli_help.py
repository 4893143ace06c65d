"""Help, ``-h`` and ``--version`` for every command: each option and argument says what it is
for, no metavar shows a Python annotation (``<bool>``, ``<list[str]>``), and the help an
operator reads at 80 columns has no broken line wraps."""

from __future__ import annotations

import itertools
import re
from importlib.metadata import version
from typing import Any

import pytest

from caravel.cli.main import command
from tests.support.processes import run_cli
from tests.unit.test_import_cost import loaded

pytestmark = pytest.mark.slow  # most tests run the console script

#: What an annotation looks like where a metavar should be: <str>, <list[str]>, {job_id}.
JUNK = re.compile(r"<[a-z]|\b(list|str|int|float|bool)\[|\[(str|int|float|bool)\]|\{")
NARROW = {"COLUMNS": "80", "TERMINAL_WIDTH": "80", "NO_COLOR": "1"}


def _tree() -> list[tuple[str, Any]]:
    """(``caravel jobs list``, its Click command) for every command and group of the tree that
    ``caravel`` runs."""
    found: list[tuple[str, Any]] = []
    pending = [("caravel", command())]
    while pending:
        path, current = pending.pop()
        found.append((path, current))
        for name, sub in getattr(current, "commands", {}).items():
            pending.append((f"{path} {name}", sub))
    return sorted(found, key=lambda item: item[0])


TREE = _tree()
NAMES = [path for path, _ in TREE]


def test_the_tree_holds_every_command() -> None:
    for name in ("caravel status", "caravel jobs replay-dead", "caravel db check"):
        assert name in NAMES
    assert "caravel worker" in NAMES
    assert "caravel outbox relay" in NAMES


@pytest.mark.parametrize(("path", "cmd"), TREE, ids=NAMES)
def test_every_parameter_has_help_and_a_plain_metavar(path: str, cmd: Any) -> None:
    import typer

    assert (cmd.help or "").strip(), f"{path} has no help text"
    ctx = typer.Context(cmd, info_name=path.split()[-1])
    for param in cmd.get_params(ctx):
        name = param.name
        if getattr(param, "hidden", False):  # kept only to refuse with a reason
            continue
        assert (getattr(param, "help", None) or "").strip(), f"{path}: {name} has no help"
        record = param.get_help_record(ctx)
        assert record is not None
        assert not JUNK.search(record[0]), f"{path}: {name} is shown as {record[0]!r}"
        for piece in param.get_usage_pieces(ctx):
            assert not JUNK.search(piece), f"{path}: {name} is used as {piece!r}"


def _broken_wraps(text: str, width: int) -> list[str]:
    """Lines that end well short of the width although the next line continues their
    sentence (it starts in lower case at the same indentation)."""
    lines = text.splitlines()
    broken = []
    for line, after in itertools.pairwise(lines):
        indent = len(line) - len(line.lstrip())
        continues = after[:indent].strip() == "" and after[indent : indent + 1].islower()
        if line.strip() and continues and len(line) < width * 0.6:
            broken.append(f"{line!r} / {after!r}")
    return broken


@pytest.mark.parametrize("path", NAMES)
def test_help_at_80_columns_has_no_junk_and_no_broken_wraps(path: str) -> None:
    done = run_cli(*path.split()[1:], "--help", env=NARROW)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert text.startswith(f"Usage: {path} ")
    assert not JUNK.search(text), JUNK.search(text)
    assert max(len(line) for line in text.splitlines()) <= 80
    # The command's description: between the usage line and the first section.
    description = text.split("\n\n", 1)[1].split("\nOptions:")[0].split("\nArguments:")[0]
    assert _broken_wraps(description, 80) == []


@pytest.mark.parametrize(
    "path", ["caravel", "caravel jobs", "caravel jobs list", "caravel db check"]
)
def test_h_is_help(path: str) -> None:
    long = run_cli(*path.split()[1:], "--help", env=NARROW)
    short = run_cli(*path.split()[1:], "-h", env=NARROW)
    assert short.returncode == 0
    assert short.stdout == long.stdout
    assert "-h, --help" in short.stdout


def test_version_prints_the_installed_version() -> None:
    done = run_cli("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"caravel {version('caravel-queue')}\n"


def test_version_loads_nothing_heavy() -> None:
    probe = """
import sys
from contextlib import redirect_stdout
import io
from caravel.cli.main import main
sys.argv = ["caravel", "--version"]
try:
    with redirect_stdout(io.StringIO()):
        main()
except SystemExit:
    pass
"""
    assert loaded(probe) == set()
