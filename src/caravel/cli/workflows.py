"""``caravel workflows``: list workflows, show one's steps and why they wait, cancel one, and
send one a signal.

``list`` and ``show`` read, for every tenant, and show states and counts, never payloads or
results. ``show`` gives one row per step name (a group of ``add_many`` members is one row with
its counts) and says why a step is not running: which dependency failed, which signal it waits
for, its timer. ``cancel`` asks first unless ``--yes`` (refused without a terminal), as
``caravel jobs cancel`` does by filter; ``--dry-run`` says what it would cancel. ``signal``
records a signal an operator sends in the application's place (a lost approval, a webhook that
never came): the payload is typed on the command line and never printed back.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from caravel.cli.connect import open_inspector, open_writer
from caravel.cli.failure import CommandFailed, WorkflowNotFoundError, fail
from caravel.cli.jsonout import emit, timestamp
from caravel.cli.options import DatabaseUrl, Json
from caravel.cli.removal import NothingChangedError, confirmed
from caravel.errors import CaravelError, ValidationError

if TYPE_CHECKING:
    from caravel.workflows import WorkflowStatus
    from caravel.workflows.nodes import StepNode

__all__ = ["app", "node_fields", "workflow_fields"]

app = typer.Typer(
    help="List workflows, show one's steps, cancel one, send one a signal.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

#: The counts of a workflow's steps, in the order they are shown.
COUNTS = ("ready", "held", "blocked", "running", "completed", "dead_letter", "cancelled")

#: The failed jobs ``show`` lists as text; ``--json`` has them all.
_FAILED_LINES = 20

WorkflowIdArg = Annotated[str, typer.Argument(help="The workflow id.")]
YesOpt = Annotated[bool, typer.Option("--yes", help="Confirm without asking.")]


def workflow_fields(workflow: WorkflowStatus) -> dict[str, Any]:
    """A workflow's document: its id, name, tenant, state, total, counts by state (as
    :attr:`WorkflowStatus.counts <caravel.workflows.WorkflowStatus.counts>` has them: ``held``
    includes ``blocked``) and times."""
    return {
        "workflow_id": workflow.id,
        "name": workflow.name,
        "tenant_id": workflow.tenant_id,
        "state": workflow.state,
        "total": workflow.total,
        "counts": {name: workflow.counts.get(name, 0) for name in COUNTS},
        "created_at": workflow.created_at,
        "finished_at": workflow.finished_at,
        "cancelled_at": workflow.cancelled_at,
    }


def node_fields(node: StepNode) -> dict[str, Any]:
    """One step name's document: its jobs (a group's count), state and counts, what it runs
    after and waits for, why it is not running, and its failed jobs (to replay)."""
    return {
        "step": node.step,
        "group": node.group,
        "members": node.members,
        "job_id": node.job_id,
        "queue": node.queue,
        "job_type": node.job_type,
        "state": node.state,
        "counts": dict(node.counts),
        "after": list(node.after),
        "on_failure": node.on_failure,
        "wait_signal": node.wait_signal,
        "signal_received": node.signal_received,
        "delay_seconds": node.delay,
        "timeout_seconds": node.timeout,
        "reasons": list(node.reasons),
        "failed": [
            {"job_id": m.job_id, "queue": m.queue, "label": m.label, "state": m.state}
            for m in node.failed
        ],
    }


async def _find(url: str, workflow_id: str) -> WorkflowStatus:
    from caravel.lookup import parse_job_id

    ident = parse_job_id(workflow_id, "workflow_id")
    async with open_inspector(url) as reader:
        found = await reader.get_workflow(ident)
    if found is None:
        raise WorkflowNotFoundError("no such workflow")
    return found


@app.command("list")
def list_workflows(
    url: DatabaseUrl,
    tenant: Annotated[
        str | None,
        typer.Option("--tenant", "-t", metavar="TENANT", help="Only this tenant's workflows."),
    ] = None,
    limit: Annotated[
        int, typer.Option(metavar="N", help="At most this many, newest first (1-10000).")
    ] = 50,
    as_json: Json = False,
) -> None:
    """List workflows of every tenant (or one), newest first, with their state and counts.
    Read-only."""

    async def go() -> list[WorkflowStatus]:
        from caravel.inspector import MAX_LIST_LIMIT
        from caravel.validation import check_identifier, check_int

        check_int("--limit", limit, 1, MAX_LIST_LIMIT)
        if tenant is not None:
            check_identifier(tenant, "--tenant")
        async with open_inspector(url) as reader:
            return await reader.list_workflows(limit, tenant_id=tenant)

    try:
        found = asyncio.run(go())
    except CaravelError as exc:
        raise fail("workflows list", exc, as_json=as_json, url=url) from None
    if as_json:
        emit({"workflows": [workflow_fields(w) for w in found]})
        return
    if not found:
        typer.echo("no workflows")
        return
    from rich.table import Table
    from rich.text import Text

    from caravel.cli.render import console, utc
    from caravel.workflows.nodes import NODE_STATES, STATE_WORDS, shown_counts

    table = Table(title="Workflows")
    for name in ("workflow id", "name", "tenant", "state"):
        table.add_column(name)
    table.add_column("steps", justify="right")
    for name in NODE_STATES:
        table.add_column(STATE_WORDS[name], justify="right")
    table.add_column("created (UTC)")
    for w in found:
        shown = shown_counts(w.counts)
        table.add_row(
            str(w.id),
            Text(w.name or ""),
            Text(w.tenant_id),
            w.state,
            str(w.total),
            *(str(shown[name]) for name in NODE_STATES),
            utc(w.created_at),
        )
    console().print(table)


@app.command("show")
def show_workflow(
    workflow_id: WorkflowIdArg,
    url: DatabaseUrl,
    as_json: Json = False,
) -> None:
    """Show a workflow's state and its steps, whatever its tenant: one row per step (a group
    one row with its counts), what it runs after, and why it is not running (which dependency
    failed, which signal it waits for, its timer). No payloads, no results. Exit 1 when there
    is no such workflow."""
    from caravel.workflows.nodes import step_nodes

    try:
        workflow = asyncio.run(_find(url, workflow_id))
    except (CaravelError, WorkflowNotFoundError) as exc:
        raise fail("workflows show", exc, as_json=as_json, url=url) from None
    nodes = step_nodes(workflow)
    if as_json:
        emit({**workflow_fields(workflow), "steps": [node_fields(n) for n in nodes]})
        return
    _print(workflow, nodes)


def _print(workflow: WorkflowStatus, nodes: list[StepNode]) -> None:
    from rich.table import Table
    from rich.text import Text

    from caravel.cli.render import console
    from caravel.workflows.nodes import counts_words, node_words

    out = console()
    counts = counts_words(workflow.counts)
    lines = [
        f"workflow {workflow.id} (tenant {workflow.tenant_id}"
        + (f", name {workflow.name})" if workflow.name else ")"),
        f"state {workflow.state}; {workflow.total} steps: {counts}",
        f"created at {timestamp(workflow.created_at)}",
        "finished "
        + ("no" if workflow.finished_at is None else f"at {timestamp(workflow.finished_at)}"),
    ]
    if workflow.cancelled_at is not None:
        lines.append(f"cancelled at {timestamp(workflow.cancelled_at)}")
    for line in lines:
        out.print(Text(line), soft_wrap=True)
    table = Table(title="Steps")
    for name in ("step", "jobs", "queue", "state", "after", "why"):
        table.add_column(name, overflow="fold")
    for node in nodes:
        jobs = f"group of {node.members}" if node.group else str(node.job_id)
        table.add_row(
            Text(node.step),
            Text(jobs),
            Text(node.queue),
            node_words(node),
            Text(", ".join(node.after)),
            Text("; ".join(node.reasons)),
        )
    out.print(table)
    failed = [member for node in nodes for member in node.failed]
    if failed:
        # One a line, whole: an id is pasted into `caravel jobs replay`.
        out.print(Text(f"failed jobs ({len(failed)}), to replay with caravel jobs replay ID:"))
        for member in failed[:_FAILED_LINES]:
            line = f"  {member.label} {member.job_id} {member.state} (queue {member.queue})"
            out.print(Text(line), soft_wrap=True)
        if len(failed) > _FAILED_LINES:
            more = len(failed) - _FAILED_LINES
            out.print(Text(f"  and {more} more (--json lists them all)"))


@app.command("cancel")
def cancel_workflow(
    workflow_id: WorkflowIdArg,
    url: DatabaseUrl,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would be cancelled; change nothing.")
    ] = False,
    yes: YesOpt = False,
    as_json: Json = False,
) -> None:
    """Cancel a workflow, whatever its tenant: its steps that have not started end as
    cancelled and never run; running steps are cancelled too (their workers cancel the
    handlers). Finished steps stay. Asks first unless --yes (refused without a terminal).
    Exit 1 when nothing was cancelled."""
    try:
        workflow = asyncio.run(_find(url, workflow_id))
        # Not started: ready and held (which includes blocked).
        waiting = workflow.counts.get("ready", 0) + workflow.counts.get("held", 0)
        running = workflow.counts.get("running", 0)
        matched = {"waiting": waiting, "running": running}
        summary = f"{waiting} not started, {running} running"
        if dry_run:
            changed = 0
            line = f"would cancel {waiting + running} steps of {workflow.id} ({summary}); "
            line += "nothing changed"
        else:
            if waiting + running == 0:
                raise NothingChangedError(
                    f"nothing to cancel; every step of {workflow.id} has finished"
                )
            confirmed(f"Cancel workflow {workflow.id} ({summary})?", yes)
            changed = asyncio.run(_cancel(url, workflow))
            line = f"cancelled {changed} steps of {workflow.id} ({summary} before)"
    except (CaravelError, CommandFailed) as exc:
        raise fail("workflows cancel", exc, as_json=as_json, url=url) from None
    if as_json:
        emit(
            {
                "workflow_id": workflow.id,
                "tenant_id": workflow.tenant_id,
                "dry_run": dry_run,
                "matched": matched,
                "changed": changed,
            }
        )
    else:
        typer.echo(line)
    if changed == 0 and not dry_run:
        raise typer.Exit(1)


async def _cancel(url: str, workflow: WorkflowStatus) -> int:
    async with open_writer(url) as queue:
        # The workflow's own tenant, as found: never one typed.
        return await queue.cancel_workflow(workflow.id, tenant_id=workflow.tenant_id)


@app.command("signal")
def signal_workflow(
    workflow_id: WorkflowIdArg,
    name: Annotated[str, typer.Argument(help="The signal's name, as the step waits for it.")],
    url: DatabaseUrl,
    payload: Annotated[
        str | None,
        typer.Option(
            "--payload",
            metavar="JSON",
            help="The signal's payload, a JSON value (default: null).",
        ),
    ] = None,
    as_json: Json = False,
) -> None:
    """Send a workflow the signal its steps wait for, whatever its tenant, as the application
    would (queue.signal). A workflow records a signal once: exit 1 when it already had this
    one (nothing changed)."""

    async def go() -> tuple[WorkflowStatus, bool]:
        from caravel.workflows.operations import workflow_signal_name

        workflow_signal_name(name)  # checked before the database is opened
        value = None
        if payload is not None:
            try:
                value = json.loads(payload)
            except ValueError:
                raise ValidationError("--payload", "must be a JSON value") from None
        workflow = await _find(url, workflow_id)
        async with open_writer(url) as queue:
            sent = await queue.signal(workflow.id, name, value, tenant_id=workflow.tenant_id)
        return workflow, sent

    try:
        workflow, sent = asyncio.run(go())
    except (CaravelError, CommandFailed) as exc:
        raise fail("workflows signal", exc, as_json=as_json, url=url) from None
    if as_json:
        emit(
            {
                "workflow_id": workflow.id,
                "tenant_id": workflow.tenant_id,
                "signal": name,
                "recorded": sent,
            }
        )
    elif sent:
        typer.echo(f"signal {name!r} recorded for {workflow.id}")
    else:
        typer.echo(f"nothing changed; {workflow.id} already had signal {name!r}")
    if not sent:
        raise typer.Exit(1)
