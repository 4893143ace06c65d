"""Workflows in immediate mode: ``enqueue_workflow`` runs every step as it is released before
it returns, and ``signal`` runs the steps it releases."""

from __future__ import annotations

from typing import Any

from caravel import JobContext, JobRegistry, Workflow
from caravel.testing import ImmediateQueue
from tests.support import Add


class Seen:
    def __init__(self) -> None:
        self.runs: list[tuple[int, Any]] = []
        self.registry = JobRegistry()
        self.registry.register("tests.add.v1", Add, self.add)

    async def add(self, job: Add, ctx: JobContext[Any]) -> int:
        assert ctx.workflow is not None
        found = [o.result async for o in ctx.workflow.results("parts")]
        self.runs.append((job.amount, found if ctx.workflow.step != "parts" else None))
        return job.amount * 10


async def test_an_immediate_queue_runs_a_workflow_and_its_signalled_step() -> None:
    seen = Seen()
    async with ImmediateQueue(seen.registry) as queue:
        wf = Workflow()
        wf.add_many("parts", [Add(1), Add(2)])
        wf.add("sum", Add(3), after=["parts"])
        wf.add("approve", Add(4), after=["sum"], wait_for="ok")
        made = await queue.enqueue_workflow(wf)
        assert sorted(seen.runs, key=lambda r: r[0]) == [(1, None), (2, None), (3, [10, 20])]
        status = await queue.get_workflow(made.workflow_id)
        assert status is not None
        assert status.state == "running"
        assert await queue.signal(made.workflow_id, "ok")
        assert seen.runs[-1] == (4, [10, 20])
        done = await queue.get_workflow(made.workflow_id)
        assert done is not None
        assert done.state == "completed"
