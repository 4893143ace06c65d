"""Caravel for the harness (bench/adapters/_protocol.py): its public API only."""

from __future__ import annotations

import gc
from typing import Any

import _protocol as p
from bench.apps import Noop, Tick, registry

from caravel import (
    DatabaseQueue,
    DispatchOptions,
    JobContext,
    JobRegistry,
    QueueWorker,
    WorkerOptions,
)


def _dispatch(key: str | None = None) -> DispatchOptions:
    return DispatchOptions(queue=p.QUEUE, tenant_id="bench", idempotency_key=key)


async def main() -> None:
    args = p.arguments()
    settings: dict[str, Any] = args.settings
    counter = p.Counter()
    counting = JobRegistry()

    @counting.handles("bench.noop.v1", Noop)
    async def count(job: Noop, ctx: JobContext[None]) -> None:
        counter.hit()

    queue = DatabaseQueue(args.dsn, counting if args.mode == "drain" else registry)

    async def setup() -> p.Work:
        await queue.check_schema()  # opens the connections
        if args.mode in ("enqueue", "bulk"):
            await queue.enqueue(Noop(-1), _dispatch("warm-up"))
        if args.mode == "fill":
            return fill
        if args.mode == "bulk":
            return bulk
        if args.mode == "enqueue":
            return one_by_one
        # What `caravel worker` does before it starts processing (docs/guides/workers.md).
        gc.collect()
        gc.freeze()
        return drain

    async def fill(control: p.Control) -> dict[str, Any]:
        for first in range(0, args.jobs, 1000):
            last = min(args.jobs, first + 1000)
            await queue.enqueue_many([(Noop(i), _dispatch()) for i in range(first, last)])
        return {}

    async def bulk(control: p.Control) -> dict[str, Any]:
        batch = int(settings.get("batch", 1000))
        for first in range(0, args.jobs, batch):
            last = min(args.jobs, first + batch)
            await queue.enqueue_many([(Noop(i), _dispatch(f"key-{i}")) for i in range(first, last)])
        return {}

    async def one_by_one(control: p.Control) -> dict[str, Any]:
        job = Tick if settings.get("job") == "tick" else Noop
        return await p.produce_one_by_one(
            args.jobs, lambda i: queue.enqueue(job(i), _dispatch(f"key-{i}")), settings
        )

    async def drain(control: p.Control) -> dict[str, Any]:
        options = WorkerOptions(
            concurrency=int(settings.get("concurrency", 1000)),
            durable_acks=bool(settings.get("durable_acks", False)),
        )
        worker = QueueWorker(queue, options=options)
        result = await p.drain(control, counter, worker.run(p.QUEUE), worker.stop)
        await worker.close()
        return result

    await p.serve(setup, queue.close)


if __name__ == "__main__":
    p.run(main, p.arguments().settings.get("loop", "asyncio"))
