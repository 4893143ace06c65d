"""``caravel workers``: the worker processes that registered themselves, and which are lost."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from caravel.cli.connect import open_inspector
from caravel.cli.options import DatabaseUrl, Json
from caravel.cli.render import console
from caravel.errors import CaravelError
from caravel.jobs import WorkerInfo

out = console()
err = console(stderr=True)


def workers(
    url: DatabaseUrl,
    lost_after: Annotated[
        float, typer.Option(help="Seconds without a heartbeat before a worker counts as lost.")
    ] = 60.0,
    as_json: Json = False,
) -> None:
    """List worker processes seen in the last 24 hours: host, pid, queues, concurrency, last
    heartbeat, jobs in flight, and whether each is running, stopped or lost. Read-only."""

    async def go() -> list[WorkerInfo]:
        async with open_inspector(url) as reader:
            return await reader.list_workers(lost_after=timedelta(seconds=lost_after))

    try:
        found = asyncio.run(go())
    except CaravelError as exc:
        err.print(f"caravel workers: {exc}", markup=False, highlight=False)
        raise typer.Exit(1) from None
    if as_json:
        rows = [
            {
                "workerId": str(w.worker_id),
                "host": w.host,
                "pid": w.pid,
                "queues": list(w.queues),
                "concurrency": w.concurrency,
                "startedAt": w.started_at.isoformat(),
                "heartbeatAt": w.heartbeat_at.isoformat(),
                "inFlight": w.in_flight,
                "state": w.state,
            }
            for w in found
        ]
        out.print(json.dumps({"workers": rows}), markup=False, highlight=False, soft_wrap=True)
        return
    table = Table(title="Workers")
    for name in ("state", "host", "pid", "queues", "concurrency", "in flight", "last heartbeat"):
        table.add_column(name)
    for w in found:
        table.add_row(
            Text(w.state),
            Text(w.host),
            str(w.pid),
            Text(", ".join(w.queues)),
            str(w.concurrency),
            str(w.in_flight),
            w.heartbeat_at.strftime("%Y-%m-%d %H:%M:%S"),
        )
    out.print(table)
