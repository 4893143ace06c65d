"""``caravel status``: per-queue counts, read without changing anything."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from caravel.cli.connect import open_inspector
from caravel.cli.failure import fail
from caravel.cli.jsonout import counts_document, emit
from caravel.cli.options import DatabaseUrl, Json
from caravel.errors import CaravelError
from caravel.store.protocol import QueueCounts
from caravel.validation import check_queue_name


async def read_counts(url: str, queue: str | None) -> list[QueueCounts]:
    """Counts per queue through a read-only connection: SQLite opened with ``mode=ro``,
    PostgreSQL sessions with ``default_transaction_read_only``. The database refuses any
    write."""

    async with open_inspector(url) as reader:
        return await reader.queue_counts(queue)


def status(
    url: DatabaseUrl,
    queue: Annotated[
        str | None, typer.Option("--queue", "-q", metavar="NAME", help="Only this queue.")
    ] = None,
    as_json: Json = False,
) -> None:
    """Show job counts per queue and state.

    Ready, delayed, running, expired-lease, dead-letter, completed and cancelled counts, and
    when the oldest ready job became due. Opens the database read-only and never changes anything.
    """
    try:
        if queue is not None:
            check_queue_name(queue)
        counts = asyncio.run(read_counts(url, queue))
    except CaravelError as exc:
        raise fail("status", exc, as_json=as_json, url=url) from None
    if as_json:
        emit(counts_document(counts))
    elif not counts:
        typer.echo("no jobs")
    else:
        from caravel.cli.render import console, counts_table

        console().print(counts_table(counts))
