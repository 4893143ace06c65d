"""A worker looks at its queues again as soon as it has written a workflow step's finish: the
finish's own statement may have released the steps after it (the release trigger), and on
SQLite and MariaDB nothing pushes that. The clock never moves here, so a worker that waited for
its poll interval would never run them."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta

from caravel import DispatchOptions, JobContext, JobRegistry, QueueWorker, WorkerOptions, Workflow
from caravel.testing import ManualClock
from tests.support import open_queue, within

MINUTE = timedelta(seconds=60)
QUIET = WorkerOptions(poll_interval=MINUTE, min_poll_interval=MINUTE, concurrency=4)


@dataclasses.dataclass(frozen=True)
class Step:
    n: int


async def test_steps_released_by_a_finish_run_without_waiting_for_a_poll(db_url: str) -> None:
    started: list[int] = []
    all_ran = asyncio.Event()

    async def handle(job: Step, ctx: JobContext[object]) -> int:
        started.append(job.n)
        if len(started) == 4:
            all_ran.set()
        return job.n

    registry = JobRegistry()
    registry.register("tests.wakeup.step.v1", Step, handle)
    options = DispatchOptions(queue="default", tenant_id="tenant-a")
    graph = Workflow("wakeups", tenant_id="tenant-a")
    graph.add("root", Step(0), options=options)
    graph.add_many("fan", [Step(1), Step(2)], after=["root"], options=options)
    graph.add("fan-in", Step(3), after=["fan"], options=options)
    async with (
        open_queue(db_url, registry, clock=ManualClock()) as queue,
        QueueWorker(queue, options=QUIET) as worker,
    ):
        await queue.enqueue_workflow(graph)
        task = asyncio.ensure_future(worker.run(["default"]))
        try:
            await within(all_ran.wait())
        finally:
            worker.stop()
            await within(task)
    assert started[0] == 0
    assert sorted(started[1:3]) == [1, 2]
    assert started[3] == 3
