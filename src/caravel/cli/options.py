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
