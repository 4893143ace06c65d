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
from caravel.store.protocol import QueueCounts, QueueLimitUsage
from caravel.validation import check_queue_name


async def read_counts(
    url: str, queue: str | None
) -> tuple[list[QueueCounts], list[QueueLimitUsage]]:
    """Counts per queue, and how the limited ones stand against their limits, through a
    read-only connection: SQLite opened with ``mode=ro``, PostgreSQL sessions with
    ``default_transaction_read_only``. The database refuses any write."""

    async with open_inspector(url) as reader:
        counts = await reader.queue_counts(queue)
        return counts, await reader.queue_limit_usage(queue, keys=0)


def status(
    url: DatabaseUrl,
    queue: Annotated[
        str | None, typer.Option("--queue", "-q", metavar="NAME", help="Only this queue.")
    ] = None,
    as_json: Json = False,
) -> None:
    """Show job counts per queue and state.

    Ready, delayed, running, expired-lease, dead-letter, completed and cancelled counts, and
    when the oldest ready job became due; for a queue with concurrency limits, its caps, its
    jobs running and its ready jobs waiting because of a limit. Opens the database read-only
    and never changes anything.
    """
    try:
        if queue is not None:
            check_queue_name(queue)
        counts, usage = asyncio.run(read_counts(url, queue))
    except CaravelError as exc:
        raise fail("status", exc, as_json=as_json, url=url) from None
    if as_json:
        emit(counts_document(counts, usage))
    elif not counts:
        typer.echo("no jobs")
    else:
        from caravel.cli.render import console, counts_table, limits_table

        shown = {c.queue for c in counts}
        console().print(counts_table(counts))
        if any(u.limit.queue in shown for u in usage):
            console().print(limits_table([u for u in usage if u.limit.queue in shown]))
