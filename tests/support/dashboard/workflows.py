"""A workflow in every state a page must show, for the dashboard's and the command line's
workflow tests: made through the real queue API and run by a real worker on a hand-moved
clock, in queues of its own so other seeded counts stay as they were.

``fetch`` completes; ``resize`` (a group of four) runs after it, and member 2 fails for good
(dead-lettered, one attempt); ``merge`` runs after the group and stops on the failure
(blocked); ``approve`` waits for the signal ``approved`` (at most three days); ``publish`` runs
a five-minute timer after ``approve``. The payloads carry :data:`SECRET`, which no operator's
page or command may show.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from caravel import DatabaseQueue, DispatchOptions, JobContext, JobRegistry, QueueWorker, Workflow
from caravel.testing import ManualClock
from tests.support.dashboard.seed import END

__all__ = [
    "BROKEN",
    "FAILING",
    "SECRET",
    "TENANT",
    "WORKFLOW_QUEUE",
    "Made",
    "Step",
    "make_workflow",
    "registry",
    "run_ready",
]

WORKFLOW_QUEUE = "flows"
TENANT = "acme"
SECRET = "hush-payload-7a1"
#: The ``n`` of the resize member that fails while :data:`FAILING` holds it.
BROKEN = 13
#: Which values still fail: a test removes one to let its replay succeed.
FAILING: set[int] = {BROKEN}


@dataclass(frozen=True)
class Step:
    n: int
    note: str = SECRET


async def _run(job: Step, ctx: JobContext) -> dict[str, Any]:
    if job.n in FAILING:
        raise RuntimeError(f"broken {SECRET}")
    return {"n": job.n, "secret": SECRET}


registry = JobRegistry()
registry.register("tests.flow_step.v1", Step, _run)


@dataclass(frozen=True)
class Made:
    workflow_id: UUID
    step_ids: dict[str, tuple[UUID, ...]]

    @property
    def failed(self) -> UUID:
        return self.step_ids["resize"][2]


async def make_workflow(url: str, at: datetime = END) -> Made:
    """The workflow above, run as far as it goes (every ready step once)."""
    options = DispatchOptions(queue=WORKFLOW_QUEUE, tenant_id=TENANT, max_attempts=1)
    workflow = Workflow("thumbnails", tenant_id=TENANT)
    workflow.add("fetch", Step(1), options=options)
    workflow.add_many(
        "resize", [Step(n) for n in (2, 3, BROKEN, 4)], after=["fetch"], options=options
    )
    workflow.add("merge", Step(5), after=["resize"], options=options)
    workflow.add(
        "approve",
        Step(6),
        after=["fetch"],
        options=options,
        wait_for="approved",
        timeout=timedelta(days=3),
    )
    workflow.add("publish", Step(7), after=["approve"], options=options, delay=timedelta(minutes=5))
    clock = ManualClock(at)
    async with DatabaseQueue(url, registry, clock=clock) as queue:
        made = await queue.enqueue_workflow(workflow)
    await run_ready(url, at)
    return Made(made.workflow_id, {k: tuple(v) for k, v in made.step_ids.items()})


async def run_ready(url: str, at: datetime = END) -> int:
    """Run every step that is ready now; how many ran."""
    ran = 0
    async with (
        DatabaseQueue(url, registry, clock=ManualClock(at)) as queue,
        QueueWorker(queue) as worker,
    ):
        while await worker.run_once(WORKFLOW_QUEUE):
            ran += 1
    return ran
