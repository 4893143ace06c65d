"""Options shared by every command, spelled the same everywhere."""

from __future__ import annotations

from typing import Annotated, Any

import typer

#: Every command's context: ``-h`` is ``--help``.
CONTEXT: dict[str, Any] = {"help_option_names": ["-h", "--help"]}

DatabaseUrl = Annotated[
    str,
    typer.Option(
        "--url",
        envvar="CARAVEL_DATABASE_URL",
        help="Queue database URL, e.g. sqlite:///queue.db or postgresql://user@host/db.",
        show_envvar=True,
        metavar="URL",
    ),
]
Json = Annotated[
    bool,
    typer.Option(
        "--json",
        help="Print one JSON object on stdout; errors as JSON on stderr.",
    ),
]

#: One job's queue and tenant, for the commands that find a job by its id.
QueueOpt = Annotated[
    str | None,
    typer.Option(
        "--queue", "-q", metavar="NAME", help="The job's queue (default: whichever it is in)."
    ),
]
TenantOpt = Annotated[
    str | None,
    typer.Option(
        "--tenant",
        "-t",
        metavar="TENANT",
        help="The job's exact tenant id (default: whichever it has).",
    ),
]
