"""``caravel``: the operator command line."""

from __future__ import annotations

import typer

from caravel.cli import db, jobs, outbox
from caravel.cli.dashboard import dashboard
from caravel.cli.status import status
from caravel.cli.worker import worker
from caravel.cli.workers import workers

app = typer.Typer(
    name="caravel",
    help="Operate a Caravel job queue: migrations, workers, status and dead letters.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(db.app, name="db")
app.add_typer(outbox.app, name="outbox")
app.add_typer(jobs.app, name="jobs")
app.command()(status)
app.command()(workers)
app.command()(worker)
app.command()(dashboard)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
