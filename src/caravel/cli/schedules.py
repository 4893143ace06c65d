"""``caravel schedules``: list your registry's schedules with their last and next slot and
whether each is paused, and pause or resume one.

A pause is persisted for every scheduler on every host: slots that come due while it lasts are
passed over, not caught up after the resume. Pausing a paused schedule or resuming a running one
changes nothing and says so; both still exit 0.
"""

from __future__ import annotations

import asyncio
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
from caravel.errors import CaravelError
from caravel.validation import check_schedule_name

app = typer.Typer(
    help="List schedules, and pause or resume one.", no_args_is_help=True, rich_markup_mode=None
)

ScheduleName = Annotated[str, typer.Argument(help="The schedule's name.")]
AppPath = Annotated[
    str,
    typer.Option("--app", help="Your job registry as module:attribute, e.g. myapp.jobs:registry."),
]


@dataclass(frozen=True, slots=True)
class Listed:
    name: str
    when: str
    queue: str
    last_slot: datetime | None
    next_slot: datetime | None
    paused_at: datetime | None


async def read_schedules(url: str, app_path: str) -> list[Listed]:
    """The registry's schedules, and any the database knows that it does not register."""
    registry = load_registry(app_path)
    async with open_inspector(url) as reader:
        states = {s.name: s for s in await reader.store.schedule_list()}
    now = SystemClock().now_ms()
    found: list[Listed] = []
    for schedule in registry.schedules:
        state = states.pop(schedule.name, None)
        when = (
            f"cron {schedule.cron} ({schedule.timezone})"
            if schedule.cron is not None
            else f"every {schedule.every}"
        )
        last = None if state is None or state.last_slot_at is None else state.last_slot_at
        paused = None if state is None else state.paused_at
        found.append(
            Listed(
                schedule.name,
                when,
                schedule.queue,
                None if last is None else from_ms(last),
                from_ms(schedule.next_slot(now)),
                None if paused is None else from_ms(paused),
            )
        )
    for state in states.values():  # a schedule removed from the code, or of another registry
        found.append(
            Listed(
                state.name,
                "not registered",
                "",
                None if state.last_slot_at is None else from_ms(state.last_slot_at),
                None,
                None if state.paused_at is None else from_ms(state.paused_at),
            )
        )
    return sorted(found, key=lambda listed: listed.name)


def _at(value: datetime | None) -> str | None:
    return None if value is None else timestamp(value)


@app.command("list")
def list_schedules(url: DatabaseUrl, app_path: AppPath, as_json: Json = False) -> None:
    """List the schedules of --app with their last and next slot (UTC) and whether each is
    paused. Read-only: the database is opened as for ``caravel status``."""
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
        typer.echo("no schedules")
        return
    from rich.table import Table
    from rich.text import Text

    from caravel.cli.render import console

    table = Table(title="Schedules")
    for column in ("name", "when", "queue", "last slot (UTC)", "next slot (UTC)", "state"):
        table.add_column(column)
    for s in found:
        state = "running" if s.paused_at is None else f"paused since {timestamp(s.paused_at)}"
        table.add_row(
            Text(s.name),
            Text(s.when),
            Text(s.queue),
            _at(s.last_slot) or "",
            _at(s.next_slot) or "",
            state,
        )
    console().print(table)


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
