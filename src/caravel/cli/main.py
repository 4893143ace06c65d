"""``caravel``: the operator command line."""

from __future__ import annotations

import typer

from caravel.cli import db
from caravel.cli.worker import worker

app = typer.Typer(
    name="caravel",
    help="Operate a Caravel job queue: migrations, workers, status and dead letters.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(db.app, name="db")
app.command()(worker)


def main() -> None:
    """Console-script entry point."""
    app()
