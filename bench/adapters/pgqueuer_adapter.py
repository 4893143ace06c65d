"""pgqueuer for the harness (bench/adapters/_protocol.py): its public API only."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import _protocol as p
import psycopg
from pgqueuer import PsycopgDriver, Queries, QueueManager
from pgqueuer.models import Job


async def main() -> None:
    args = p.arguments()
    settings: dict[str, Any] = args.settings
    counter = p.Counter()
    conn = await psycopg.AsyncConnection.connect(args.dsn, autocommit=True)
    queries = Queries(PsycopgDriver(conn))

    async def setup() -> p.Work:
        if args.mode == "install":
            await queries.install()
        return {"install": installed, "fill": fill, "bulk": bulk, "enqueue": one_by_one}.get(
            args.mode, drain
        )

    async def installed(control: p.Control) -> dict[str, Any]:
        return {}

    async def insert(first: int, last: int, keyed: bool) -> None:
        count = last - first
        await queries.enqueue(
            ["noop"] * count,
            [str(n).encode() for n in range(first, last)],
            [0] * count,
            dedupe_key=[f"key-{n}" for n in range(first, last)] if keyed else None,
        )

    async def fill(control: p.Control) -> dict[str, Any]:
        for first in range(0, args.jobs, 1000):
            await insert(first, min(args.jobs, first + 1000), keyed=False)
        return {}

    async def bulk(control: p.Control) -> dict[str, Any]:
        batch = int(settings.get("batch", 1000))
        for first in range(0, args.jobs, batch):
            await insert(first, min(args.jobs, first + batch), keyed=True)
        return {}

    async def one_by_one(control: p.Control) -> dict[str, Any]:
        name = "tick" if settings.get("job") == "tick" else "noop"
        return await p.produce_one_by_one(
            args.jobs,
            lambda i: queries.enqueue(name, str(i).encode(), dedupe_key=f"key-{i}"),
            settings,
        )

    def manager() -> QueueManager:
        qm = QueueManager(queries)

        @qm.entrypoint("noop")
        async def noop(job: Job) -> None:
            counter.hit()

        @qm.entrypoint("tick")
        async def tick(job: Job) -> None:
            p.stamp(int(job.payload or b"0"))

        return qm

    async def drain(control: p.Control) -> dict[str, Any]:
        qm = manager()
        run = qm.run(
            batch_size=int(settings.get("batch", 10)), dequeue_timeout=timedelta(seconds=1)
        )
        return await p.drain(control, counter, run, qm.shutdown.set)

    if args.mode == "stamp-worker":
        qm = manager()
        p.say("ready")
        await qm.run(batch_size=int(settings.get("batch", 10)))
        return
    await p.serve(setup, conn.close)


if __name__ == "__main__":
    p.run(main, p.arguments().settings.get("loop", "uvloop"))
