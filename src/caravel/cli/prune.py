"""``caravel jobs prune``: remove finished jobs older than the ages given, in bounded batches.
A keyed job leaves a tombstone that keeps its key's duplicate protection until ``--keys`` has
passed; a keyless one is deleted. It counts first and asks, unless ``--yes``."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated

import typer

from caravel.cli.connect import open_writer
from caravel.cli.failure import CommandFailed, fail
from caravel.cli.flags import flag_message
from caravel.cli.jsonout import emit
from caravel.cli.options import DatabaseUrl, Json
from caravel.errors import CaravelError, ValidationError

if TYPE_CHECKING:
    from caravel.retention import Retention
    from caravel.store.pruning import PruneBatch

__all__ = ["AGE_FLAGS", "NothingPrunedError", "age", "prune_jobs", "retention_from_flags"]

#: The flag of each :class:`~caravel.Retention` age (``caravel jobs prune``'s, and
#: ``caravel worker``'s for its scheduled pruning).
AGE_FLAGS = {
    "completed": "--completed",
    "cancelled": "--cancelled",
    "dead_letter": "--dead-letter",
    "keys": "--keys",
}
_FLAGS = {**AGE_FLAGS, "limit": "--limit", "queue": "--queue"}


class NothingPrunedError(CommandFailed):
    """Another pruner was running, or the operator declined."""


def age(flag: str, text: str | None) -> timedelta | None:
    """``7d``, ``12h``, ``30m``, ``90s`` or a bare number of seconds."""
    from caravel.retention import parse_age

    return parse_age(flag, text)


def retention_from_flags(
    completed: str | None, cancelled: str | None, dead_letter: str | None, keys: str | None
) -> Retention | None:
    """The :class:`~caravel.Retention` the age flags ask for, or ``None`` when none is given;
    a :class:`~caravel.errors.ValidationError` naming the flag for an age that cannot be
    read (and an :class:`~caravel.errors.OptionsError` naming the field for one out of range)."""
    from caravel.retention import Retention

    typed = {
        "completed": completed,
        "cancelled": cancelled,
        "dead_letter": dead_letter,
        "keys": keys,
    }
    ages = {name: age(AGE_FLAGS[name], text) for name, text in typed.items()}
    if all(value is None for value in ages.values()):
        return None
    return Retention(**ages)


def _flagged(exc: ValidationError) -> ValidationError:
    """``exc`` in the words the operator typed (``--dead-letter``, not ``dead_letter``)."""
    if exc.field not in _FLAGS:
        return exc
    return ValidationError(_FLAGS[exc.field], flag_message(exc, _FLAGS).split(" ", 1)[1])


def _summary(done: PruneBatch, *, dry_run: bool) -> str:
    verb = "would prune" if dry_run else "pruned"
    return (
        f"{verb} {done.deleted + done.tombstoned} jobs ({done.deleted} deleted, "
        f"{done.tombstoned} kept as tombstones); {done.tombstones_deleted} expired tombstones"
    )


def prune_jobs(
    url: DatabaseUrl,
    completed: Annotated[
        str | None,
        typer.Option(metavar="AGE", help="Completed jobs finished this long ago (7d, 12h, 30m)."),
    ] = None,
    cancelled: Annotated[
        str | None, typer.Option(metavar="AGE", help="Cancelled jobs finished this long ago.")
    ] = None,
    dead_letter: Annotated[
        str | None,
        typer.Option("--dead-letter", metavar="AGE", help="Dead letters this old (keep long)."),
    ] = None,
    keys: Annotated[
        str | None,
        typer.Option(
            metavar="AGE",
            help="Delete tombstones pruned this long ago; their keys' duplicate protection ends.",
        ),
    ] = None,
    queue: Annotated[
        str | None, typer.Option("--queue", "-q", metavar="NAME", help="Only this queue.")
    ] = None,
    limit: Annotated[
        int, typer.Option(metavar="N", help="Rows per batch, each its own transaction (1-10000).")
    ] = 1000,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only count what would go; change nothing.")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", help="Prune without asking.")] = False,
    as_json: Json = False,
) -> None:
    """Prune finished jobs older than the ages given (at least one).

    Keyed jobs leave a tombstone that still settles repeated and conflicting submissions; keyless
    ones are deleted. Counts first and asks, unless --yes or --dry-run. Exit 1 when nothing was
    pruned because another pruner was running or the answer was no.
    """

    def policy() -> Retention:
        found = retention_from_flags(completed, cancelled, dead_letter, keys)
        if found is None:
            raise ValidationError(
                "ages", "give at least one of --completed, --cancelled, --dead-letter, --keys"
            )
        return found

    async def go(retention: Retention, *, counting: bool) -> PruneBatch:
        async with open_writer(url) as q:
            return await q.prune(retention, queue=queue, limit=limit, dry_run=counting)

    try:
        try:
            retention = policy()
            preview = asyncio.run(go(retention, counting=True))
        except ValidationError as exc:
            raise _flagged(exc) from None
        if dry_run:
            done = preview
        else:
            question = _summary(preview, dry_run=True).replace("would prune", "Prune", 1) + "?"
            if not yes and preview.total and not typer.confirm(question, err=True):
                raise NothingPrunedError("nothing pruned; not confirmed")
            done = asyncio.run(go(retention, counting=False)) if preview.total else preview
            if done.busy:
                raise NothingPrunedError("stopped: another pruner is running; try again later")
    except (CaravelError, NothingPrunedError) as exc:
        raise fail("jobs prune", exc, as_json=as_json, url=url) from None
    if as_json:
        emit(
            {
                "dry_run": dry_run,
                "deleted": done.deleted,
                "tombstoned": done.tombstoned,
                "tombstones_deleted": done.tombstones_deleted,
            }
        )
    else:
        typer.echo(_summary(done, dry_run=dry_run))
