"""``caravel``: the operator command line."""

from __future__ import annotations

import typer

from caravel.cli import db

app = typer.Typer(
    name="caravel",
    help="Operate a Caravel job queue: migrations, workers, status and dead letters.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(db.app, name="db")


def main() -> None:
    """Console-script entry point."""
    app()
