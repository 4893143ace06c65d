"""``python -m caravel_samples.flask COMMAND``: the Flask sample's command line.

Every command takes the database as ``--url`` or ``CARAVEL_DATABASE_URL``; an invalid one
stops it with exit code 2 and a line naming the setting.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType
from typing import Annotated

import sqlalchemy as sa
import typer
from caravel_samples.flask import schema
from caravel_samples.flask.app import create_app
from caravel_samples.flask.jobs import QUEUE
from caravel_samples.flask.services import services_of
from caravel_samples.flask.settings import URL_VARIABLE, Settings
from werkzeug.serving import make_server

from caravel import CaravelError

#: The registry ``caravel worker`` loads (see :mod:`caravel_samples.flask.worker`).
REGISTRY = "caravel_samples.flask.worker:registry"

app = typer.Typer(
    help="Caravel's Flask sample: signups saved with their welcome job in one transaction, "
    "in the database named by --url or CARAVEL_DATABASE_URL.",
    no_args_is_help=True,
    add_completion=False,
)

Url = Annotated[
    str,
    typer.Option(
        "--url",
        envvar=URL_VARIABLE,
        help="The database: sqlite:///signups.db, postgresql://user@host/name or "
        "mariadb://user@host/name.",
    ),
]


def _settings(url: str) -> Settings:
    try:
        return Settings.from_url(url)
    except CaravelError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


@app.command()
def migrate(url: Url) -> None:
    """Apply the queue's and the sample's migrations (the application never does it itself)."""
    settings = _settings(url)
    try:
        schema.migrate_all(settings)
    except (CaravelError, sa.exc.SQLAlchemyError) as exc:
        typer.echo(f"error: migration failed: {type(exc).__name__}: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo("the queue and the signups table are at their newest migrations")


@app.command()
def check(url: Url) -> None:
    """Exit 0 when the schema is up to date; 1 with the reasons (read-only)."""
    problems = schema.check_all(_settings(url))
    for problem in problems:
        typer.echo(problem, err=True)
    if problems:
        raise typer.Exit(1)
    typer.echo("the schema is up to date")


def _stop(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@app.command()
def serve(
    url: Url,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8000,
) -> None:
    """Serve the application on Werkzeug's threaded server until Ctrl+C or SIGTERM.

    For trying the sample out: in production, serve create_app(settings) with a WSGI server.
    """
    settings = _settings(url)
    problems = schema.check_all(settings)
    for problem in problems:
        typer.echo(f"error: {problem}", err=True)
    if problems:
        raise typer.Exit(2)
    application = create_app(settings)
    try:
        server = make_server(host, port, application, threaded=True)
        signal.signal(signal.SIGTERM, _stop)
        typer.echo(f"serving on http://{host}:{server.port}; Ctrl+C or SIGTERM stops", err=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
    finally:
        services_of(application).close()
    typer.echo("server stopped", err=True)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def worker(ctx: typer.Context, url: Url) -> None:
    """Run caravel worker on the signups queue with this sample's registry.

    Further options (--concurrency 4, ...) are passed on to caravel worker.
    """
    settings = _settings(url)
    env = {**os.environ, URL_VARIABLE: settings.database_url}
    argv = [sys.executable, "-m", "caravel", "worker", "--url", settings.database_url]
    argv += ["--app", REGISTRY, "--queue", QUEUE, *ctx.args]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, env)  # noqa: S606 - this interpreter, fixed arguments


if __name__ == "__main__":
    app()
