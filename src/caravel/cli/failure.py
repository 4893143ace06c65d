"""How a command fails: one line on standard error naming the cause (or, under ``--json``, the
error document of :mod:`caravel.cli.jsonout`), and an exit code by kind of failure:

- 2: usage and configuration, fixed by changing what was typed or set up: a bad flag value, a
  malformed URL, a SQLite file that does not exist, an unknown revision, a bad ``--app`` (one
  with a schedule whose slots cannot be computed too), a schema that is not migrated or not at
  the newest revision, a downgrade that would delete rows and was not forced;
- 1: runtime failures, where running it again later may succeed: the database failed or could
  not be reached, or a lookup found nothing (no such job, batch, chain or workflow, nothing to
  replay).
"""

from __future__ import annotations

import sys

import typer

from caravel.cli.flags import FlagError
from caravel.cli.jsonout import error_document
from caravel.cli.opening import explain
from caravel.errors import (
    DatabaseNotFoundError,
    DowngradeRefusedError,
    ScheduleError,
    SchemaNotReadyError,
    ValidationError,
)

__all__ = [
    "CONFIGURATION",
    "BatchNotFoundError",
    "ChainNotFoundError",
    "CommandFailed",
    "JobNotFoundError",
    "NothingReplayedError",
    "WorkflowNotFoundError",
    "exit_code",
    "fail",
]

#: Errors that exit 2: what the operator typed or set up must change.
CONFIGURATION = (
    ValidationError,
    SchemaNotReadyError,
    DatabaseNotFoundError,
    DowngradeRefusedError,
    ScheduleError,
    FlagError,
)


class CommandFailed(Exception):
    """A failure of the command itself rather than of the library; exit 1."""


class JobNotFoundError(CommandFailed):
    """No job has this id in this queue and tenant."""


class BatchNotFoundError(CommandFailed):
    """No batch has this id."""


class ChainNotFoundError(CommandFailed):
    """No chain has this id (the id of its first step)."""


class WorkflowNotFoundError(CommandFailed):
    """No workflow has this id."""


class NothingReplayedError(CommandFailed):
    """A replay found no dead letter to replay, or the operator declined."""


def exit_code(exc: BaseException) -> int:
    return 2 if isinstance(exc, CONFIGURATION) else 1


def fail(
    command: str,
    exc: BaseException,
    *,
    as_json: bool = False,
    url: str | None = None,
    database: str = "queue",
) -> typer.Exit:
    """Report ``exc`` for ``caravel COMMAND`` and return the exit to raise (``raise fail(...)
    from None``, so no traceback is chained into the output). With the ``url`` of the
    ``database`` the command opened, a failure to open it says so in the operator's words,
    with the next step (:mod:`caravel.cli.opening`)."""
    code = exit_code(exc)
    said = None if url is None else explain(exc, url, database)
    # One line whatever the message holds: a driver's reason may span several.
    line = " ".join(f"caravel {command}: {said or exc}".split())
    if as_json:
        sys.stderr.write(error_document(type(exc).__name__, line, code) + "\n")
    else:
        typer.echo(line, err=True)
    return typer.Exit(code)
