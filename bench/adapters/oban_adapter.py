"""oban (the Python port of Oban) for the harness (bench/adapters/_protocol.py): its public API
only. It runs in a virtual environment of its own on Python 3.12 (bench/venvs.py).

oban's open-source edition has no unique jobs, so its enqueues carry no idempotency key.
"""

from __future__ import annotations

import asyncio
from typing import Any

import _protocol as p
from oban import Oban, worker
from oban.schema import install


async def main() -> None:
    args = p.arguments()
    settings: dict[str, Any] = args.settings
    counter = p.Counter()
    pool = await Oban.create_pool(args.dsn, min_size=1, max_size=int(settings.get("pool", 10)))
    limit = int(settings.get("limit", 10))
    serving = args.mode in ("drain", "stamp-worker")
    oban = Oban(pool=pool, queues={p.QUEUE: limit} if serving else {})

    @worker(queue=p.QUEUE)
    class Noop:
        async def process(self, job: Any) -> None:
            counter.hit()

    @worker(queue=p.QUEUE)
    class Tick:
        async def process(self, job: Any) -> None:
            p.stamp(int(job.args["n"]))

    async def setup() -> p.Work:
        if args.mode == "install":
            await install(pool)
        return {"install": installed, "fill": fill, "bulk": fill, "enqueue": one_by_one}.get(
            args.mode, drain
        )

    async def installed(control: p.Control) -> dict[str, Any]:
        return {}

    async def fill(control: p.Control) -> dict[str, Any]:
        batch = int(settings.get("batch", 1000))
        for first in range(0, args.jobs, batch):
            last = min(args.jobs, first + batch)
            await oban.enqueue_many([Noop.new({"n": n}) for n in range(first, last)])
        return {}

    async def one_by_one(control: p.Control) -> dict[str, Any]:
        job = Tick if settings.get("job") == "tick" else Noop
        return await p.produce_one_by_one(
            args.jobs, lambda i: oban.enqueue(job.new({"n": i})), settings
        )

    async def drain(control: p.Control) -> dict[str, Any]:
        stopped = asyncio.Event()

        async def run() -> None:
            await oban.start()
            await stopped.wait()
            await oban.stop()

        return await p.drain(control, counter, run(), stopped.set)

    if args.mode == "stamp-worker":
        await oban.start()
        p.say("ready")
        await asyncio.Event().wait()
        return

    async def teardown() -> None:
        await pool.close()

    await p.serve(setup, teardown)


if __name__ == "__main__":
    p.run(main, p.arguments().settings.get("loop", "uvloop"))
