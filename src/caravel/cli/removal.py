"""``caravel jobs cancel`` and ``caravel jobs delete``: one job by id, or every job of a queue a
filter matches, with a dry run that changes nothing and a confirmation before anything does.

Both print one document under ``--json`` (the same shape for one job and for a filter): the
queue, the job id (null for a filter), whether it was a dry run, how many matched per state,
how many changed, and, for one job, what happened to it.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from caravel.cancelling import parse_older_than
from caravel.cli.connect import open_writer
from caravel.cli.failure import CommandFailed, fail
from caravel.cli.jsonout import emit
from caravel.cli.options import DatabaseUrl, Json
from caravel.errors import CaravelError, ValidationError
from caravel.jobs import DEFAULT_TENANT, CancelOutcome, JobState
from caravel.store.removal import CANCELLABLE, DELETABLE

__all__ = ["NothingChangedError", "cancel", "confirmed", "delete"]


class NothingChangedError(CommandFailed):
    """A cancel or delete changed nothing: no such job, a job in the wrong state, nothing
    matched, or the operator declined."""


JobIdArg = Annotated[
    str | None,
    typer.Argument(help="One job's id; leave it out to act on every job the filters match."),
]
QueueOpt = Annotated[str, typer.Option("--queue", "-q", metavar="NAME", help="The queue.")]
TenantOpt = Annotated[
    str | None,
    typer.Option(
        "--tenant",
        "-t",
        metavar="TENANT",
        help="The exact tenant: the job's (default: default), or only this tenant's jobs.",
    ),
]
TypeOpt = Annotated[
    str | None, typer.Option("--type", metavar="WIRE_NAME", help="Only jobs of this wire name.")
]
AgeOpt = Annotated[
    str | None,
    typer.Option(
        "--older-than",
        metavar="AGE",
        help="Only jobs older than this: 90s, 30m, 12h or 7d (a cancel: since created; a "
        "delete: since finished).",
    ),
]
DryRunOpt = Annotated[
    bool, typer.Option("--dry-run", help="Say what would change, per state; change nothing.")
]
YesOpt = Annotated[bool, typer.Option("--yes", help="Confirm without asking.")]


def _document(
    queue: str,
    job_id: str | None,
    *,
    deleting: bool,
    dry_run: bool,
    matched: dict[JobState, int],
    changed: int,
    outcome: str | None,
) -> dict[str, Any]:
    states = DELETABLE if deleting else CANCELLABLE
    return {
        "queue": queue,
        "job_id": job_id,
        "dry_run": dry_run,
        "matched": {state.value: matched.get(state, 0) for state in states},
        "changed": changed,
        "outcome": outcome,
    }


def _summary(matched: dict[JobState, int]) -> str:
    return ", ".join(f"{state.value} {count}" for state, count in matched.items()) or "none"


def confirmed(question: str, yes: bool) -> None:
    """Ask on the terminal unless ``yes``; without a terminal to ask on, refuse."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise ValidationError("--yes", "is required when standard input is not a terminal")
    if not typer.confirm(question, err=True):
        raise NothingChangedError("nothing changed; not confirmed")


def _one(url: str, job_id: str, queue: str, tenant: str | None, *, deleting: bool) -> Any:
    async def go() -> CancelOutcome | bool:
        async with open_writer(url) as q:
            who = tenant if tenant is not None else DEFAULT_TENANT
            if deleting:
                return await q.delete(job_id, queue, who)
            return await q.cancel(job_id, queue, who)

    return asyncio.run(go())


@dataclass(frozen=True, slots=True)
class _Filter:
    """The flags that narrow a cancel or delete, as typed: a job id takes only ``tenant``."""

    tenant: str | None
    job_type: str | None
    states: list[str] | None
    older_than: str | None


def _run(
    action: str,
    url: str,
    job_id: str | None,
    queue: str,
    chosen: _Filter,
    *,
    dry_run: bool,
    yes: bool,
    as_json: bool,
) -> None:
    deleting = action == "delete"
    try:
        if job_id is not None:
            if (
                chosen.job_type is not None
                or chosen.states
                or chosen.older_than is not None
                or dry_run
            ):
                raise ValidationError(
                    "JOB_ID", "takes no --type, --state, --older-than or --dry-run"
                )
            found = _one(url, job_id, queue, chosen.tenant, deleting=deleting)
            doc, line = _one_result(queue, job_id, found, deleting=deleting)
        else:
            doc, line = _many(url, queue, chosen, dry_run=dry_run, yes=yes, deleting=deleting)
    except (CaravelError, CommandFailed) as exc:
        raise fail(f"jobs {action}", exc, as_json=as_json, url=url) from None
    if as_json:
        emit(doc)
    else:
        typer.echo(line)
    if doc["changed"] == 0 and not dry_run:
        raise typer.Exit(1)


def _one_result(
    queue: str, job_id: str, found: CancelOutcome | bool, *, deleting: bool
) -> tuple[dict[str, Any], str]:
    if isinstance(found, bool):
        outcome = "deleted" if found else "not_deleted"
        line = (
            f"deleted {job_id}"
            if found
            else (f"nothing deleted; {job_id} is not a finished job of this queue and tenant")
        )
        matched: dict[JobState, int] = {}
        changed = int(found)
    else:
        outcome = found.value
        changed = int(found in (CancelOutcome.CANCELLED, CancelOutcome.CANCELLED_RUNNING))
        was = JobState.RUNNING if found is CancelOutcome.CANCELLED_RUNNING else JobState.READY
        matched = {was: 1} if changed else {}
        line = {
            CancelOutcome.CANCELLED: f"cancelled {job_id}: it was waiting",
            CancelOutcome.CANCELLED_RUNNING: (
                f"cancelled {job_id}: it was running; its worker cancels the handler"
            ),
            CancelOutcome.ALREADY_FINISHED: f"nothing cancelled; {job_id} had already finished",
            CancelOutcome.NOT_FOUND: f"nothing cancelled; no job {job_id} in this queue and tenant",
        }[found]
    doc = _document(
        queue,
        job_id,
        deleting=deleting,
        dry_run=False,
        matched=matched,
        changed=changed,
        outcome=outcome,
    )
    return doc, line


def _many(
    url: str, queue: str, chosen: _Filter, *, dry_run: bool, yes: bool, deleting: bool
) -> tuple[dict[str, Any], str]:
    older_than = parse_older_than("--older-than", chosen.older_than)
    verb = "delete" if deleting else "cancel"
    done_verb = "deleted" if deleting else "cancelled"

    async def act(dry: bool) -> Any:
        async with open_writer(url) as q:
            method = q.delete_matching if deleting else q.cancel_matching
            return await method(
                queue,
                job_type=chosen.job_type,
                tenant_id=chosen.tenant,
                states=chosen.states or None,
                older_than=older_than,
                dry_run=dry,
            )

    preview = asyncio.run(act(True))
    matched: dict[JobState, int] = preview.matched
    total = sum(matched.values())
    if dry_run:
        doc = _document(
            queue,
            None,
            deleting=deleting,
            dry_run=True,
            matched=matched,
            changed=0,
            outcome=None,
        )
        return doc, f"would {verb} {total} jobs of {queue} ({_summary(matched)}); nothing changed"
    if total == 0:
        raise NothingChangedError(f"nothing to {verb}; no job of {queue} matches")
    confirmed(f"{verb.capitalize()} {total} jobs of {queue} ({_summary(matched)})?", yes)
    result = asyncio.run(act(False))
    doc = _document(
        queue,
        None,
        deleting=deleting,
        dry_run=False,
        matched=result.matched,
        changed=result.changed,
        outcome=None,
    )
    return doc, f"{done_verb} {result.changed} jobs of {queue} ({_summary(result.matched)})"


StatesOpt = Annotated[
    list[str] | None,
    typer.Option("--state", metavar="STATE", help="Only jobs in this stored state (repeatable)."),
]


def _command(action: str, doc: str) -> Callable[..., None]:
    """The ``caravel jobs cancel`` or ``delete`` command: the same flags, the same handling;
    only the action and its help differ."""

    def command(
        url: DatabaseUrl,
        queue: QueueOpt,
        job_id: JobIdArg = None,
        tenant: TenantOpt = None,
        job_type: TypeOpt = None,
        state: StatesOpt = None,
        older_than: AgeOpt = None,
        dry_run: DryRunOpt = False,
        yes: YesOpt = False,
        as_json: Json = False,
    ) -> None:
        chosen = _Filter(tenant=tenant, job_type=job_type, states=state, older_than=older_than)
        _run(action, url, job_id, queue, chosen, dry_run=dry_run, yes=yes, as_json=as_json)

    command.__name__ = command.__qualname__ = action
    command.__doc__ = doc
    return command


cancel = _command(
    "cancel",
    """Cancel one job, or every waiting or running job a filter matches.

    A waiting job is cancelled at once; a running one too, and its worker cancels the handler.
    --state is ready or running. By filter, asks first unless --yes (refused without a
    terminal). Exit 1 when nothing was cancelled.
    """,
)
delete = _command(
    "delete",
    """Delete one finished job, or every finished job a filter matches.

    --state is completed, dead_letter or cancelled; waiting and running jobs are never deleted.
    By filter, asks first unless --yes (refused without a terminal). Exit 1 when nothing was
    deleted.
    """,
)
