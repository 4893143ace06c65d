"""``caravel db``: apply and inspect the queue's migrations."""

from __future__ import annotations

from typing import Annotated

import typer

from caravel.cli.failure import fail
from caravel.cli.jsonout import emit
from caravel.cli.options import DatabaseUrl, Json
from caravel.errors import CaravelError

app = typer.Typer(
    help="Apply and inspect the queue's database migrations.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


def _upgrade(url: str, revision: str, as_json: bool) -> None:
    """Move the queue schema up to ``revision`` and say where it was and where it is now."""
    from caravel import migrate

    try:
        before = _revision(url)
        migrate.upgrade(url, revision)
        after = migrate.current(url)
    except CaravelError as exc:
        raise fail("db upgrade", exc, as_json=as_json, url=url) from None
    if as_json:
        emit({"previous": before, "current": after, "head": migrate.head()})
    else:
        typer.echo(f"queue schema at {after or 'base'}")


def _revision(url: str) -> str | None:
    """The applied revision; ``None`` also for a SQLite file an upgrade is about to create."""
    from caravel import migrate
    from caravel.errors import DatabaseNotFoundError

    try:
        return migrate.current(url)
    except DatabaseNotFoundError:
        return None


@app.command()
def upgrade(
    url: DatabaseUrl,
    revision: Annotated[str, typer.Argument(help="Target revision; head is the newest.")] = "head",
    as_json: Json = False,
) -> None:
    """Apply the queue migrations up to REVISION.

    Exit 0 when applied; 2 for a URL or revision that cannot be used; 1 when the database
    fails.
    """
    _upgrade(url, revision, as_json)


@app.command()
def downgrade(
    url: DatabaseUrl,
    revision: Annotated[
        str, typer.Argument(help="Target revision: -1 is one step back, base removes all.")
    ] = "-1",
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Go ahead when steps would delete rows or strand jobs (held chain steps and "
            "batch callbacks are dead-lettered), and list what went.",
        ),
    ] = False,
    as_json: Json = False,
) -> None:
    """Revert the queue migrations down to REVISION.

    A downgrade that would delete rows or strand jobs (cancelled jobs, key tombstones, held
    chain steps, at base every job) changes nothing and says how many of what, unless --force
    is given. Exit codes as for upgrade; a refusal exits 2.
    """
    from caravel import migrate

    try:
        report = migrate.downgrade(url, revision, force=force)
    except CaravelError as exc:
        raise fail("db downgrade", exc, as_json=as_json, url=url) from None
    if as_json:
        emit(
            {
                "previous": report.previous,
                "current": report.current,
                "head": migrate.head(),
                "losses": [
                    {"revision": x.revision, "kind": x.kind, "rows": x.rows, "fate": x.fate}
                    for x in report.losses
                ],
            }
        )
        return
    typer.echo(f"queue schema at {report.current or 'base'}")
    for loss in report.losses:
        typer.echo(str(loss))


@app.command()
def current(url: DatabaseUrl, as_json: Json = False) -> None:
    """Print the applied queue revision (or 'none')."""
    from caravel import migrate

    try:
        found, newest = migrate.current(url), migrate.head()
    except CaravelError as exc:
        raise fail("db current", exc, as_json=as_json, url=url) from None
    if as_json:
        emit({"current": found, "head": newest})
    else:
        typer.echo(found or "none")


@app.command()
def check(url: DatabaseUrl, as_json: Json = False) -> None:
    """Confirm the queue schema is current and matches the model.

    Current means at the newest revision. Exit 0 when it is; 2 with the reason when it is not
    migrated, behind or different; 1 when the database fails.
    """
    from caravel import migrate

    try:
        report = migrate.check(url)
    except CaravelError as exc:
        raise fail("db check", exc, as_json=as_json, url=url) from None
    if as_json:
        emit({"current": report.current, "head": report.head})
    else:
        typer.echo(f"queue schema is up to date ({report.current})")
