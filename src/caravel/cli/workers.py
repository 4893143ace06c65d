"""``caravel workers``: the worker processes that registered themselves, and which are lost."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Annotated

import typer

from caravel.cli.connect import open_inspector
from caravel.cli.failure import fail
from caravel.cli.jsonout import emit, record_fields
from caravel.cli.options import DatabaseUrl, Json
from caravel.errors import CaravelError, ValidationError
from caravel.jobs import WorkerInfo


def workers(
    url: DatabaseUrl,
    lost_after: Annotated[
        float,
        typer.Option(
            metavar="SECONDS",
            help="Seconds without a heartbeat before a worker counts as lost.",
        ),
    ] = 60.0,
    as_json: Json = False,
) -> None:
    """List the worker processes seen in the last 24 hours.

    For each: state (running, stopped or lost), host, pid, queues, concurrency, jobs in flight
    and last heartbeat. Read-only.
    """

    async def go() -> list[WorkerInfo]:
        if not lost_after > 0:
            raise ValidationError("--lost-after", "must be a positive number of seconds")
        async with open_inspector(url) as reader:
            return await reader.list_workers(lost_after=timedelta(seconds=lost_after))

    try:
        found = asyncio.run(go())
    except CaravelError as exc:
        raise fail("workers", exc, as_json=as_json, url=url) from None
    if as_json:
        emit(
            {
                "lost_after_seconds": lost_after,
                "workers": [record_fields(w) for w in found],
            }
        )
    else:
        from caravel.cli.render import console, workers_table

        console().print(workers_table(found))
