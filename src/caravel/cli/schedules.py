"""``caravel schedules``: list schedules with their last and next slot and whether each is
paused, and pause or resume one.

With ``--app`` the list is the registry's schedules (and any the database knows that it does
not register); without it, what the database holds (``caravel_schedules``: each schedule that
handled a slot or was paused, its last slot and pause), since what a schedule is (its cron or
interval, zone, queue, job, hence its next slot) lives only in the code.

A pause is persisted for every scheduler on every host: slots that come due while it lasts are
passed over, not caught up after the resume. Pausing a paused schedule or resuming a running one
changes nothing and says so; both still exit 0.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

import typer

from caravel.cli.apps import load_registry
from caravel.cli.connect import open_inspector, open_writer
from caravel.cli.failure import fail
from caravel.cli.jsonout import emit, timestamp
from caravel.cli.options import DatabaseUrl, Json
from caravel.clock import SystemClock, from_ms
from caravel.errors import CaravelError, ScheduleError
from caravel.validation import check_schedule_name

app = typer.Typer(
    help="List schedules, and pause or resume one.", no_args_is_help=True, rich_markup_mode=None
)

ScheduleName = Annotated[str, typer.Argument(help="The schedule's name.")]
AppPath = Annotated[
    str | None,
    typer.Option(
        "--app",
        help="Your job registry as module:attribute, e.g. myapp.jobs:registry. Without it, "
        "only what the database holds: no cron, zone, queue or next slot.",
    ),
]

#: What the list says when the code-only fields are missing for want of ``--app``.
NEEDS_APP = "cron or interval, time zone, queue, job and next slot are in the code: pass --app"


@dataclass(frozen=True, slots=True)
class Listed:
    name: str
    when: str | None  # None: not known without --app
    queue: str | None
    last_slot: datetime | None
    next_slot: datetime | None
    paused_at: datetime | None


async def read_schedules(url: str, app_path: str | None) -> list[Listed]:
    """The registry's schedules, and any the database knows that it does not register; without
    ``app_path``, the database's schedules only."""
    registry = None if app_path is None else load_registry(app_path)
    async with open_inspector(url) as reader:
        records = {record.name: record for record in await reader.list_schedules()}
    now = SystemClock().now_ms()
    found: list[Listed] = []
    for schedule in () if registry is None else registry.schedules:
        record = records.pop(schedule.name, None)
        when = (
            f"cron {schedule.cron} ({schedule.timezone})"
            if schedule.cron is not None
            else f"every {schedule.every}"
        )
        try:
            next_slot = schedule.next_slot(now)
        except Exception as exc:  # croniter's own errors: named for the schedule
            raise ScheduleError(
                schedule.name, "computing its next slot", type(exc).__name__
            ) from exc
        found.append(
            Listed(
                schedule.name,
                when,
                schedule.queue,
                None if record is None else record.last_slot_at,
                from_ms(next_slot),
                None if record is None else record.paused_at,
            )
        )
    # Without --app, every schedule; with it, one removed from the code or of another registry.
    unknown = None if registry is None else "not registered"
    for record in records.values():
        found.append(
            Listed(
                record.name,
                unknown,
                None if registry is None else "",
                record.last_slot_at,
                None,
                record.paused_at,
            )
        )
    return sorted(found, key=lambda listed: listed.name)


def _at(value: datetime | None) -> str | None:
    return None if value is None else timestamp(value)


@app.command("list")
def list_schedules(url: DatabaseUrl, app_path: AppPath = None, as_json: Json = False) -> None:
    """List the schedules of --app with their cron or interval, queue, last and next slot
    (UTC) and whether each is paused; without --app, the schedules the database holds state
    for, with their last slot and pause only. Read-only: the database is opened as for
    ``caravel status``."""
    try:
        found = asyncio.run(read_schedules(url, app_path))
    except (CaravelError, ValueError) as exc:
        raise fail("schedules list", exc, as_json=as_json, url=url) from None
    if as_json:
        rows: list[dict[str, Any]] = [
            {
                "name": s.name,
                "when": s.when,
                "queue": s.queue,
                "last_slot": _at(s.last_slot),
                "next_slot": _at(s.next_slot),
                "paused": s.paused_at is not None,
                "paused_at": _at(s.paused_at),
            }
            for s in found
        ]
        emit({"schedules": rows})
        return
    if not found:
        typer.echo(
            "no schedules"
            if app_path is not None
            else "no schedules in the database (a schedule has a row once a scheduler handled "
            "one of its slots or it was paused); pass --app to list your registry's"
        )
        return
    _print_table(found, with_code=app_path is not None)


def _state(s: Listed) -> str:
    return "running" if s.paused_at is None else f"paused since {timestamp(s.paused_at)}"


#: The table's columns: header, cell, and whether it needs --app.
_COLUMNS: tuple[tuple[str, Callable[[Listed], str], bool], ...] = (
    ("name", lambda s: s.name, False),
    ("when", lambda s: s.when or "", True),
    ("queue", lambda s: s.queue or "", True),
    ("last slot (UTC)", lambda s: _at(s.last_slot) or "", False),
    ("next slot (UTC)", lambda s: _at(s.next_slot) or "", True),
    ("state", _state, False),
)


def _print_table(found: list[Listed], *, with_code: bool) -> None:
    from rich.table import Table
    from rich.text import Text

    from caravel.cli.render import console

    columns = [(header, cell) for header, cell, code in _COLUMNS if with_code or not code]
    table = Table(title="Schedules")
    for header, _ in columns:
        table.add_column(header)
    for s in found:
        table.add_row(*(Text(cell(s)) for _, cell in columns))
    console().print(table)
    if not with_code:
        typer.echo(f"{NEEDS_APP} module:registry to see them")


def _change(command: str, url: str, name: str, as_json: bool, *, pause: bool) -> None:
    async def go() -> bool:
        async with open_writer(url) as q:
            return await (q.pause_schedule(name) if pause else q.resume_schedule(name))

    try:
        check_schedule_name(name)
        changed = asyncio.run(go())
    except CaravelError as exc:
        raise fail(command, exc, as_json=as_json, url=url) from None
    if as_json:
        emit({"schedule": name, "paused": pause, "changed": changed})
    elif pause:
        typer.echo(f"paused schedule {name}" if changed else f"{name} was already paused")
    else:
        typer.echo(f"resumed schedule {name}" if changed else f"{name} was not paused")


@app.command()
def pause(name: ScheduleName, url: DatabaseUrl, as_json: Json = False) -> None:
    """Pause a schedule for every scheduler: its slots are passed over until it is resumed.
    Exit 0 also when it was paused already."""
    _change("schedules pause", url, name, as_json, pause=True)


@app.command()
def resume(name: ScheduleName, url: DatabaseUrl, as_json: Json = False) -> None:
    """Resume a paused schedule from its next slot. Exit 0 also when it was not paused."""
    _change("schedules resume", url, name, as_json, pause=False)
