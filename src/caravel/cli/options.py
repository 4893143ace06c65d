"""Options shared by every command, spelled the same everywhere."""

from __future__ import annotations

from typing import Annotated

import typer

DatabaseUrl = Annotated[
    str,
    typer.Option(
        "--url",
        envvar="CARAVEL_DATABASE_URL",
        help="Queue database URL, e.g. sqlite:///queue.db or postgresql://user@host/db. "
        "Also read from CARAVEL_DATABASE_URL.",
        show_envvar=True,
    ),
]
Json = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
