"""``caravel jobs``: list, show and replay jobs. Payloads appear only in ``jobs show --payload``."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Annotated, Any
from uuid import UUID

import typer

from caravel.cli.connect import open_inspector, open_writer
from caravel.cli.options import DatabaseUrl, Json
from caravel.cli.render import console, status_json, statuses_table
from caravel.errors import CaravelError, ValidationError
from caravel.jobs import DEFAULT_TENANT, JobState

app = typer.Typer(help="List, inspect and replay jobs.", no_args_is_help=True)
out = console()
err = console(stderr=True)

QueueOpt = Annotated[str, typer.Option("--queue", "-q", help="The job's queue.")]
TenantOpt = Annotated[str, typer.Option("--tenant", "-t", help="The job's exact tenant id.")]


def _fail(command: str, exc: CaravelError) -> typer.Exit:
    err.print(f"caravel jobs {command}: {exc}", markup=False, highlight=False)
    return typer.Exit(1)


def _job_id(value: str) -> UUID:
    try:
        return UUID(value)
    except ValueError:
        raise ValidationError("job_id", "must be a UUID") from None


def _filter(
    queue: str | None, tenant: str | None, state: str | None, job_type: str | None, limit: int
) -> dict[str, Any]:
    try:
        parsed = None if state is None else JobState(state)
    except ValueError:
        raise ValidationError(
            "state", "must be one of " + ", ".join(s.value for s in JobState)
        ) from None
    return {
        "queue": queue,
        "tenant_id": tenant,
        "state": parsed,
        "job_type": job_type,
        "limit": limit,
    }


@app.command("list")
def list_jobs(
    url: DatabaseUrl,
    queue: Annotated[str | None, typer.Option("--queue", "-q")] = None,
    tenant: Annotated[str | None, typer.Option("--tenant", "-t")] = None,
    state: Annotated[
        str | None, typer.Option(help="ready, running, completed or dead_letter.")
    ] = None,
    job_type: Annotated[str | None, typer.Option("--type", help="Wire name.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many, newest first.")] = 50,
    as_json: Json = False,
) -> None:
    """List jobs, newest first, without payloads. Read-only."""

    async def go() -> list[dict[str, object]]:
        where = _filter(queue, tenant, state, job_type, limit)
        async with open_inspector(url) as reader:
            found = await reader.list_jobs(**where)
        if not as_json:
            out.print(statuses_table(found))
        return [status_json(s) for s in found]

    try:
        rows = asyncio.run(go())
    except CaravelError as exc:
        raise _fail("list", exc) from None
    if as_json:
        out.print(json.dumps({"jobs": rows}), markup=False, highlight=False, soft_wrap=True)


@app.command()
def show(
    job_id: Annotated[str, typer.Argument(help="The job id.")],
    url: DatabaseUrl,
    queue: QueueOpt,
    tenant: TenantOpt = DEFAULT_TENANT,
    payload: Annotated[bool, typer.Option("--payload", help="Include the stored payload.")] = False,
) -> None:
    """Show one job as JSON (exact queue and tenant matched). Exit 1 when there is no such
    job."""

    async def go() -> dict[str, object] | None:
        ident = _job_id(job_id)
        async with open_inspector(url) as reader:
            found = await reader.get_status(ident, queue, tenant)
            if found is None:
                return None
            text = await reader.get_payload(ident, queue, tenant) if payload else None
        return status_json(found, text)

    try:
        shown = asyncio.run(go())
    except CaravelError as exc:
        raise _fail("show", exc) from None
    if shown is None:
        err.print("caravel jobs show: no such job in this queue and tenant", markup=False)
        raise typer.Exit(1)
    out.print(json.dumps(shown, indent=2), markup=False, highlight=False, soft_wrap=True)


@app.command()
def replay(
    job_id: Annotated[str, typer.Argument(help="The dead-lettered job's id.")],
    url: DatabaseUrl,
    queue: QueueOpt,
    tenant: TenantOpt = DEFAULT_TENANT,
) -> None:
    """Replay one dead-lettered job: same id and payload, attempts reset, due now.

    Exit 1 when nothing was replayed (no such job, or not a dead letter). Replay repeats side
    effects.
    """

    async def go() -> bool:
        async with open_writer(url) as q:
            return await q.replay(_job_id(job_id), queue, tenant)

    try:
        done = asyncio.run(go())
    except CaravelError as exc:
        raise _fail("replay", exc) from None
    if not done:
        err.print(
            f"caravel jobs replay: nothing replayed; {job_id} is not a dead letter "
            "of this queue and tenant",
            markup=False,
            highlight=False,
        )
        raise typer.Exit(1)
    out.print(f"replayed {job_id}: ready, attempts reset", markup=False, highlight=False)


@app.command("replay-dead")
def replay_dead(
    url: DatabaseUrl,
    queue: Annotated[str | None, typer.Option("--queue", "-q")] = None,
    tenant: Annotated[str | None, typer.Option("--tenant", "-t")] = None,
    job_type: Annotated[str | None, typer.Option("--type", help="Wire name.")] = None,
    limit: Annotated[int, typer.Option(help="Replay at most this many.")] = 1000,
    yes: Annotated[bool, typer.Option("--yes", help="Confirm without asking.")] = False,
) -> None:
    """Replay every dead letter matching the filters (at most --limit).

    Shows a progress bar on a terminal and one line per job otherwise. Exit 1 when nothing was
    replayed.
    """

    async def targets() -> list[tuple[UUID, str, str]]:
        where = _filter(queue, tenant, "dead_letter", job_type, limit)
        async with open_inspector(url) as reader:
            found = await reader.list_jobs(**where)
        return [(s.job_id, s.queue, s.tenant_id) for s in found]

    async def run(selected: list[tuple[UUID, str, str]]) -> int:
        from rich.progress import Progress

        done = 0
        interactive = sys.stderr.isatty()
        async with open_writer(url) as q:
            with Progress(console=err, disable=not interactive) as progress:
                task = progress.add_task("replaying dead letters", total=len(selected))
                for ident, job_queue, job_tenant in selected:
                    if await q.replay(ident, job_queue, job_tenant):
                        done += 1
                        if not interactive:
                            err.print(f"replayed {ident}", markup=False, highlight=False)
                    progress.advance(task)
        return done

    try:
        selected = asyncio.run(targets())
        if not selected:
            err.print("caravel jobs replay-dead: no dead letters match", markup=False)
            raise typer.Exit(1)
        if not yes and not typer.confirm(f"Replay {len(selected)} dead letters?", err=True):
            raise typer.Exit(1)
        done = asyncio.run(run(selected))
    except CaravelError as exc:
        raise _fail("replay-dead", exc) from None
    out.print(f"replayed {done} of {len(selected)}", markup=False)
    if done == 0:
        raise typer.Exit(1)
