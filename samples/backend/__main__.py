"""``python -m caravel_samples.backend COMMAND``: the backend sample's command line.

Settings come from ``CARAVEL__...`` environment variables (see ``settings.py``); invalid ones
stop every command with exit code 2 and a message naming the setting and its allowed range.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import sys
from typing import Annotated

import sqlalchemy as sa
import typer
import uvicorn
from caravel_samples.backend import accounts, observability, schema
from caravel_samples.backend.app import create_app
from caravel_samples.backend.db import create_engine
from caravel_samples.backend.settings import Settings, SettingsError, load_settings
from caravel_samples.backend.validation import check_new_password, normalize_email

from caravel import CaravelError

app = typer.Typer(
    help="Caravel's web backend sample: accounts, notes and a durable counter queue in one "
    "database named by CARAVEL__IDENTITY_DATABASE.",
    no_args_is_help=True,
    add_completion=False,
)
users = typer.Typer(help="Manage accounts.", no_args_is_help=True)
app.add_typer(users, name="users")


def _settings() -> Settings:
    try:
        return load_settings()
    except SettingsError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


@app.command()
def migrate() -> None:
    """Apply the queue's and the application's migrations (the app never does it itself)."""
    settings = _settings()
    try:
        schema.migrate_all(settings)
    except (CaravelError, sa.exc.SQLAlchemyError) as exc:
        typer.echo(f"error: migration failed: {type(exc).__name__}: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo("the queue and the application's tables are at their newest migrations")


@app.command()
def check() -> None:
    """Check the schema read-only: exit 0 when it is up to date, 1 with the reasons."""
    problems = schema.check_all(_settings())
    for problem in problems:
        typer.echo(problem, err=True)
    if problems:
        raise typer.Exit(1)
    typer.echo("the schema is up to date")


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8000,
) -> None:
    """Run the application under uvicorn until Ctrl+C or SIGTERM."""
    settings = _settings()
    observability.install()
    uvicorn.run(create_app(settings), host=host, port=port, server_header=False)


def _read_password() -> str:
    """From a hidden prompt (asked twice) on a terminal, else the first line of stdin."""
    if sys.stdin.isatty():
        first = getpass.getpass("Password: ")
        if getpass.getpass("Repeat the password: ") != first:
            typer.echo("error: the passwords differ", err=True)
            raise typer.Exit(2)
        return first
    return sys.stdin.readline().removesuffix("\n").removesuffix("\r")


@users.command("create")
def create_user(
    email: Annotated[str, typer.Option(help="The account's email address.")],
    operator: Annotated[
        bool, typer.Option("--operator", help="May read every tenant's jobs (/api/jobs).")
    ] = False,
) -> None:
    """Create an account; the password comes from a prompt or stdin, never the arguments."""
    settings = _settings()
    try:
        address = normalize_email(email)
    except ValueError as exc:
        typer.echo(f"error: --email {exc}", err=True)
        raise typer.Exit(2) from None
    password = _read_password()
    try:
        check_new_password(password)
    except ValueError as exc:
        typer.echo(f"error: the password {exc}", err=True)
        raise typer.Exit(2) from None

    async def go() -> accounts.User:
        engine = create_engine(settings)
        try:
            return await accounts.create_user(engine, address, password, operator=operator)
        finally:
            await engine.dispose()

    try:
        user = asyncio.run(go())
    except accounts.EmailTakenError:
        typer.echo("error: an account with this email already exists", err=True)
        raise typer.Exit(1) from None
    except sa.exc.SQLAlchemyError as exc:
        typer.echo(
            f"error: {type(exc).__name__}; is the database migrated? Run "
            "`python -m caravel_samples.backend migrate`",
            err=True,
        )
        raise typer.Exit(1) from None
    typer.echo(json.dumps({"id": str(user.id), "email": user.email, "operator": user.is_operator}))


if __name__ == "__main__":
    app()
