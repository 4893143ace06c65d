"""``caravel db``: apply and inspect the queue's migrations."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from caravel.cli.options import DatabaseUrl, Json
from caravel.cli.render import console
from caravel.errors import CaravelError, ValidationError

app = typer.Typer(help="Apply and inspect the queue's database migrations.", no_args_is_help=True)
out = console()
err = console(stderr=True)


def _fail(exc: CaravelError) -> typer.Exit:
    """One line naming the problem; exit 2 for what the user typed, 1 for the database."""
    from rich.markup import escape

    err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
    return typer.Exit(2 if isinstance(exc, ValidationError) else 1)


@app.command()
def upgrade(
    url: DatabaseUrl,
    revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
) -> None:
    """Apply the queue migrations up to REVISION (default: the newest)."""
    from caravel import migrate

    try:
        migrate.upgrade(url, revision)
        out.print(f"queue schema at {migrate.current(url)}", highlight=False)
    except CaravelError as exc:
        raise _fail(exc) from None


@app.command()
def downgrade(
    url: DatabaseUrl,
    revision: Annotated[str, typer.Argument(help="Target revision; 'base' removes all.")] = "-1",
) -> None:
    """Revert the queue migrations down to REVISION (default: one step).

    Removing the jobs table deletes every job and idempotency key in it.
    """
    from caravel import migrate

    try:
        migrate.downgrade(url, revision)
        out.print(f"queue schema at {migrate.current(url) or 'base'}", highlight=False)
    except CaravelError as exc:
        raise _fail(exc) from None


@app.command()
def current(url: DatabaseUrl, as_json: Json = False) -> None:
    """Print the applied queue revision (or 'none')."""
    from caravel import migrate

    try:
        found = migrate.current(url)
    except CaravelError as exc:
        raise _fail(exc) from None
    if as_json:
        out.print_json(json.dumps({"current": found, "head": migrate.head()}))
    else:
        out.print(found or "none", highlight=False)


@app.command()
def check(url: DatabaseUrl, as_json: Json = False) -> None:
    """Exit 0 when the queue schema is at the newest revision and matches the model; 1 with the
    reason otherwise."""
    from caravel import migrate

    try:
        report = migrate.check(url)
    except CaravelError as exc:
        if as_json:
            out.print_json(json.dumps({"ok": False, "error": str(exc)}))
            raise typer.Exit(1) from None
        raise _fail(exc) from None
    if as_json:
        out.print_json(json.dumps({"ok": True, "current": report.current, "head": report.head}))
    else:
        out.print(f"queue schema is up to date ({report.current})", highlight=False)
