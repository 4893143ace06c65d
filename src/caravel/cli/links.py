"""``caravel batches`` and ``caravel chains``: how batches and chains stand, read-only, for
every tenant. Like ``caravel jobs``, they show statuses and counts, never payloads or results.

A held job (a chain step waiting for the one before it, a batch's callback waiting for its
batch) is shown as ``held``, not as a ready job due in the year 9999.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from caravel.cli.connect import open_inspector
from caravel.cli.failure import BatchNotFoundError, ChainNotFoundError, fail
from caravel.cli.jsonout import emit, timestamp
from caravel.cli.options import DatabaseUrl, Json
from caravel.errors import CaravelError

if TYPE_CHECKING:
    from caravel.batches import BatchStatus
    from caravel.chains import ChainStatus
    from caravel.jobs import JobStatus

batches = typer.Typer(
    help="List batches, and show one.", no_args_is_help=True, rich_markup_mode=None
)
chains = typer.Typer(help="Show a chain's steps.", no_args_is_help=True, rich_markup_mode=None)


def job_state(job: JobStatus) -> str:
    """A job's stored state, or ``held`` for a held one."""
    return "held" if job.held else job.state.value


def batch_fields(batch: BatchStatus) -> dict[str, Any]:
    return {
        "batch_id": batch.batch_id,
        "tenant_id": batch.tenant_id,
        "total": batch.total,
        "pending": batch.pending,
        "completed": batch.completed,
        "failed": batch.failed,
        "cancelled": batch.cancelled,
        "finished": batch.finished,
        "callback_id": batch.callback_id,
        "created_at": batch.created_at,
        "finished_at": batch.finished_at,
    }


@batches.command("list")
def list_batches(
    url: DatabaseUrl,
    limit: Annotated[
        int, typer.Option(metavar="N", help="At most this many, newest first (1-10000).")
    ] = 50,
    as_json: Json = False,
) -> None:
    """List batches of every tenant, newest first, with their counts. Read-only."""

    async def go() -> list[BatchStatus]:
        from caravel.inspector import MAX_LIST_LIMIT
        from caravel.validation import check_int

        check_int("--limit", limit, 1, MAX_LIST_LIMIT)
        async with open_inspector(url) as reader:
            return await reader.list_batches(limit)

    try:
        found = asyncio.run(go())
    except CaravelError as exc:
        raise fail("batches list", exc, as_json=as_json, url=url) from None
    if as_json:
        emit({"batches": [batch_fields(b) for b in found]})
        return
    if not found:
        typer.echo("no batches")
        return
    from rich.table import Table
    from rich.text import Text

    from caravel.cli.render import console, utc

    table = Table(title="Batches")
    table.add_column("batch id")
    table.add_column("tenant")
    for name in ("total", "pending", "completed", "failed", "cancelled"):
        table.add_column(name, justify="right")
    table.add_column("created (UTC)")
    table.add_column("finished (UTC)")
    table.add_column("callback id")
    for b in found:
        table.add_row(
            str(b.batch_id),
            Text(b.tenant_id),
            *(str(n) for n in (b.total, b.pending, b.completed, b.failed, b.cancelled)),
            utc(b.created_at),
            "" if b.finished_at is None else utc(b.finished_at),
            "" if b.callback_id is None else str(b.callback_id),
        )
    console().print(table)


@batches.command("show")
def show_batch(
    batch_id: Annotated[str, typer.Argument(help="The batch id.")],
    url: DatabaseUrl,
    as_json: Json = False,
) -> None:
    """Show one batch's counts, whether it has finished, and its callback's job id, whatever
    its tenant. Exit 1 when there is no such batch."""

    async def go() -> BatchStatus:
        from caravel.lookup import parse_job_id

        ident = parse_job_id(batch_id, "batch_id")
        async with open_inspector(url) as reader:
            found = await reader.get_batch(ident)
        if found is None:
            raise BatchNotFoundError("no such batch")
        return found

    try:
        batch = asyncio.run(go())
    except (CaravelError, BatchNotFoundError) as exc:
        raise fail("batches show", exc, as_json=as_json, url=url) from None
    if as_json:
        emit(batch_fields(batch))
        return
    lines = [
        f"batch {batch.batch_id} (tenant {batch.tenant_id})",
        f"total {batch.total}: {batch.pending} pending, {batch.completed} completed, "
        f"{batch.failed} failed, {batch.cancelled} cancelled",
        "finished " + ("no" if batch.finished_at is None else f"at {timestamp(batch.finished_at)}"),
        f"created at {timestamp(batch.created_at)}",
        "callback " + ("none" if batch.callback_id is None else str(batch.callback_id)),
    ]
    typer.echo("\n".join(lines))


def chain_fields(chain: ChainStatus) -> dict[str, Any]:
    stopped = chain.stopped_at
    now = datetime.now(UTC)
    return {
        "chain_id": chain.chain_id,
        "state": chain.state,
        "stopped_at_step": None if stopped is None else stopped.chain_step,
        "steps": [
            {
                "step": index,
                "job_id": step.job_id,
                "job_type": step.job_type,
                "queue": step.queue,
                "tenant_id": step.tenant_id,
                "state": job_state(step),
                "shown_state": step.shown_state(now),
                "held": step.held,
                "attempt": step.attempt,
                "finished_at": step.finished_at,
            }
            for index, step in enumerate(chain.steps)
        ],
    }


@chains.command("show")
def show_chain(
    chain_id: Annotated[str, typer.Argument(help="The chain id (its first step's job id).")],
    url: DatabaseUrl,
    as_json: Json = False,
) -> None:
    """Show a chain's steps in order (index, job id, type, queue, state; ``held`` for a step
    that waits for the one before it) and the chain's state, whatever its tenant. Exit 1 when
    there is no such chain."""

    async def go() -> ChainStatus:
        from caravel.lookup import parse_job_id

        ident = parse_job_id(chain_id, "chain_id")
        async with open_inspector(url) as reader:
            found = await reader.get_chain(ident)
        if found is None:
            raise ChainNotFoundError("no such chain")
        return found

    try:
        chain = asyncio.run(go())
    except (CaravelError, ChainNotFoundError) as exc:
        raise fail("chains show", exc, as_json=as_json, url=url) from None
    if as_json:
        emit(chain_fields(chain))
        return
    from rich.table import Table
    from rich.text import Text

    from caravel.cli.render import console

    table = Table(title=f"Chain {chain.chain_id}: {chain.state}")
    for name in ("step", "job id", "type", "queue", "state"):
        table.add_column(name)
    now = datetime.now(UTC)
    for index, step in enumerate(chain.steps):
        table.add_row(
            str(index),
            str(step.job_id),
            Text(step.job_type),
            Text(step.queue),
            step.shown_state(now),
        )
    console().print(table)
