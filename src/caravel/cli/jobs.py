"""``caravel jobs``: list, show, replay, cancel and delete jobs. Payloads and results appear
only in ``jobs show --payload`` and ``jobs show --result``."""

from __future__ import annotations

import asyncio
import sys
from typing import Annotated, Any
from uuid import UUID

import typer

from caravel.cli import removal, showjob
from caravel.cli.connect import open_inspector, open_writer
from caravel.cli.failure import NothingReplayedError, fail
from caravel.cli.jsonout import emit, record_fields
from caravel.cli.options import DatabaseUrl, Json, QueueOpt, TenantOpt
from caravel.cli.prune import prune_jobs
from caravel.errors import CaravelError, ValidationError
from caravel.jobs import JobState, JobStatus
from caravel.store.protocol import SHOWN_STATES

app = typer.Typer(
    help="List, inspect, replay, cancel, delete and prune jobs.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.command("show")(showjob.show)
app.command("cancel")(removal.cancel)
app.command("delete")(removal.delete)
app.command("prune")(prune_jobs)

QueueFilter = Annotated[
    str | None, typer.Option("--queue", "-q", metavar="NAME", help="Only this queue.")
]
TenantFilter = Annotated[
    str | None,
    typer.Option("--tenant", "-t", metavar="TENANT", help="Only this tenant (exact match)."),
]
TypeFilter = Annotated[
    str | None,
    typer.Option("--type", metavar="WIRE_NAME", help="Only jobs of this wire name."),
]
TagFilter = Annotated[
    str | None,
    typer.Option("--tag", metavar="TAG", help="Only jobs carrying this tag (exact match)."),
]


def _job_id(value: str) -> UUID:
    try:
        return UUID(value)
    except ValueError:
        raise ValidationError("job_id", "must be a UUID") from None


def _narrowed(queue: str | None, tenant: str | None) -> bool:
    """Whether a job was looked for in a queue or tenant, not by its id alone."""
    return queue is not None or tenant is not None


def _filter(
    queue: str | None,
    tenant: str | None,
    state: str | None,
    job_type: str | None,
    limit: int,
    tag: str | None = None,
) -> dict[str, Any]:
    # The words of `caravel status` and the dashboard, judged when the command runs: a job not
    # due yet is "delayed", not "ready"; a running job whose lease ended is "expired".
    if state is not None and state not in SHOWN_STATES:
        raise ValidationError("--state", "must be one of " + ", ".join(SHOWN_STATES))
    from caravel.inspector import MAX_LIST_LIMIT
    from caravel.validation import check_int

    check_int("--limit", limit, 1, MAX_LIST_LIMIT)
    found: dict[str, Any] = {
        "queue": queue,
        "tenant_id": tenant,
        "shown_state": state,
        "job_type": job_type,
        "limit": limit,
    }
    if tag is not None:
        from caravel.tags import check_tag

        found["tag"] = check_tag(tag, "--tag")
    return found


@app.command("list")
def list_jobs(
    url: DatabaseUrl,
    queue: QueueFilter = None,
    tenant: TenantFilter = None,
    state: Annotated[
        str | None,
        typer.Option(
            metavar="STATE",
            help="Only jobs in this state now: ready (due), delayed (not due yet: a delay or a "
            "retry's backoff), held (a chain step or batch callback not released), running "
            "(lease live), expired (lease ended), dead_letter, completed or cancelled.",
        ),
    ] = None,
    job_type: TypeFilter = None,
    tag: TagFilter = None,
    limit: Annotated[
        int, typer.Option(metavar="N", help="At most this many, newest first (1-10000).")
    ] = 50,
    as_json: Json = False,
) -> None:
    """List jobs, newest first, without payloads. Read-only."""

    async def go() -> list[JobStatus]:
        where = _filter(queue, tenant, state, job_type, limit, tag)
        async with open_inspector(url) as reader:
            return await reader.list_jobs(**where)

    try:
        found = asyncio.run(go())
    except CaravelError as exc:
        raise fail("jobs list", exc, as_json=as_json, url=url) from None
    if as_json:
        emit({"jobs": [record_fields(s) for s in found]})
    else:
        from caravel.cli.render import console, statuses_table

        console().print(statuses_table(found))


@app.command()
def replay(
    job_id: Annotated[str, typer.Argument(help="The dead-lettered job's id.")],
    url: DatabaseUrl,
    queue: QueueOpt = None,
    tenant: TenantOpt = None,
    as_json: Json = False,
) -> None:
    """Replay one dead-lettered job.

    The id finds it; --queue and --tenant, when given, must be its own exactly. Same id and
    payload, attempts reset, due now, in its own queue and tenant. Exit 1 when nothing was
    replayed (no such job, or not a dead letter). Replay repeats side effects.
    """

    async def go() -> JobStatus:
        ident = _job_id(job_id)
        async with open_inspector(url) as reader:
            found = await reader.find_job(ident, queue=queue, tenant_id=tenant)
        if found is None:
            raise NothingReplayedError(
                f"nothing replayed; {job_id} is not a dead letter of this queue and tenant"
                if _narrowed(queue, tenant)
                else "nothing replayed; no job has this id"
            )
        # Exactly the job found: its own queue and tenant, whatever was typed.
        async with open_writer(url) as q:
            if await q.replay(ident, found.queue, found.tenant_id):
                return found
        raise NothingReplayedError(
            f"nothing replayed; {job_id} is no longer a dead letter"
            if found.state is JobState.DEAD_LETTER
            else f"nothing replayed; {job_id} is not a dead letter (it is {found.state.value})"
        )

    try:
        found = asyncio.run(go())
    except (CaravelError, NothingReplayedError) as exc:
        raise fail("jobs replay", exc, as_json=as_json, url=url) from None
    if as_json:
        emit(
            {
                "job_id": found.job_id,
                "queue": found.queue,
                "tenant_id": found.tenant_id,
                "replayed": True,
            }
        )
    else:
        typer.echo(
            f"replayed {job_id} (queue {found.queue}, tenant {found.tenant_id}): "
            "ready, attempts reset"
        )


@app.command("replay-dead")
def replay_dead(
    url: DatabaseUrl,
    queue: QueueFilter = None,
    tenant: TenantFilter = None,
    job_type: TypeFilter = None,
    tag: TagFilter = None,
    limit: Annotated[
        int, typer.Option(metavar="N", help="Replay at most this many (1-10000).")
    ] = 1000,
    yes: Annotated[bool, typer.Option("--yes", help="Confirm without asking.")] = False,
    as_json: Json = False,
) -> None:
    """Replay every dead letter matching the filters.

    Asks first, unless --yes. At most --limit, newest first. Shows a progress bar on a terminal
    and one line per job otherwise (under --json, the jobs are in the document instead). Exit 1
    when nothing was replayed (nothing matched, or the answer was no).
    """

    async def targets() -> list[tuple[UUID, str, str]]:
        where = _filter(queue, tenant, "dead_letter", job_type, limit, tag)
        async with open_inspector(url) as reader:
            found = await reader.list_jobs(**where)
        return [(s.job_id, s.queue, s.tenant_id) for s in found]

    async def run(selected: list[tuple[UUID, str, str]]) -> list[bool]:
        from rich.progress import Progress

        from caravel.cli.render import console

        done: list[bool] = []
        interactive = sys.stderr.isatty()
        async with open_writer(url) as q:
            with Progress(console=console(stderr=True), disable=not interactive) as progress:
                task = progress.add_task("replaying dead letters", total=len(selected))
                for ident, job_queue, job_tenant in selected:
                    done.append(await q.replay(ident, job_queue, job_tenant))
                    if done[-1] and not interactive and not as_json:
                        typer.echo(f"replayed {ident}", err=True)
                    progress.advance(task)
        return done

    try:
        selected = asyncio.run(targets())
        if not selected:
            raise NothingReplayedError("no dead letters match")
        if not yes and not typer.confirm(f"Replay {len(selected)} dead letters?", err=True):
            raise NothingReplayedError("nothing replayed; not confirmed")
        outcomes = asyncio.run(run(selected))
    except (CaravelError, NothingReplayedError) as exc:
        raise fail("jobs replay-dead", exc, as_json=as_json, url=url) from None
    if as_json:
        jobs = [
            {"job_id": ident, "queue": job_queue, "tenant_id": job_tenant, "replayed": replayed}
            for (ident, job_queue, job_tenant), replayed in zip(selected, outcomes, strict=True)
        ]
        emit({"matched": len(selected), "replayed": sum(outcomes), "jobs": jobs})
    else:
        typer.echo(f"replayed {sum(outcomes)} of {len(selected)}")
    if not any(outcomes):
        raise typer.Exit(1)
