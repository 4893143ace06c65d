"""procrastinate for the harness (bench/adapters/_protocol.py): its public API only. Its
queueing lock stands in for an idempotency key (it holds only while the job waits)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import _protocol as p
import procrastinate


async def main() -> None:
    args = p.arguments()
    settings: dict[str, Any] = args.settings
    counter = p.Counter()
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=args.dsn))

    @app.task(name="noop", queue=p.QUEUE)
    async def noop(n: int) -> None:
        counter.hit()

    @app.task(name="tick", queue=p.QUEUE)
    async def tick(n: int) -> None:
        p.stamp(n)

    async def setup() -> p.Work:
        await app.open_async()
        if args.mode == "install":
            await app.schema_manager.apply_schema_async()
        return {"install": installed, "fill": fill, "bulk": bulk, "enqueue": one_by_one}.get(
            args.mode, drain
        )

    async def installed(control: p.Control) -> dict[str, Any]:
        return {}

    async def fill(control: p.Control) -> dict[str, Any]:
        for first in range(0, args.jobs, 1000):
            last = min(args.jobs, first + 1000)
            await noop.batch_defer_async(*({"n": n} for n in range(first, last)))
        return {}

    async def bulk(control: p.Control) -> dict[str, Any]:
        batch = int(settings.get("batch", 1000))
        for first in range(0, args.jobs, batch):
            last = min(args.jobs, first + batch)
            await noop.configure(queueing_lock=None).batch_defer_async(
                *({"n": n} for n in range(first, last))
            )
        return {}

    async def one_by_one(control: p.Control) -> dict[str, Any]:
        task = tick if settings.get("job") == "tick" else noop
        return await p.produce_one_by_one(
            args.jobs, lambda i: task.configure(queueing_lock=f"key-{i}").defer_async(n=i), settings
        )

    def worker() -> asyncio.Task[None]:
        concurrency = int(settings.get("concurrency", 10))
        return asyncio.ensure_future(
            app.run_worker_async(
                queues=[p.QUEUE], concurrency=concurrency, install_signal_handlers=False
            )
        )

    async def drain(control: p.Control) -> dict[str, Any]:
        running: list[asyncio.Task[None]] = []

        async def run() -> None:
            running.append(worker())
            with contextlib.suppress(asyncio.CancelledError):
                await running[0]

        def stop() -> None:
            running[0].cancel()

        return await p.drain(control, counter, run(), stop)

    if args.mode == "stamp-worker":
        await app.open_async()
        running = worker()
        p.say("ready")
        await running
        return
    await p.serve(setup, app.close_async)


if __name__ == "__main__":
    p.run(main, p.arguments().settings.get("loop", "uvloop"))
