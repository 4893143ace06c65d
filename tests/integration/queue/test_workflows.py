"""Workflows through the public calls, run by the real worker (:func:`caravel.testing.drain`):
steps read their dependencies' results by step name, a fan-in pages a group's results, a
failed dependency stops or lets through its dependents, a signal releases a waiting step, and
the application's and operators' reads agree."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from caravel import (
    DispatchOptions,
    JobContext,
    JobRegistry,
    QueueInspector,
    SyncQueue,
    ValidationError,
    Workflow,
)
from caravel.testing import ManualClock, drain
from tests.support import open_queue


@dataclasses.dataclass(frozen=True)
class Fetch:
    url: str


@dataclasses.dataclass(frozen=True)
class Resize:
    size: int


@dataclasses.dataclass(frozen=True)
class Join:
    label: str


class Seen:
    def __init__(self) -> None:
        self.fetched: list[Any] = []
        self.joined: list[Any] = []
        self.failed: list[Any] = []
        self.waits: list[Any] = []

    async def fetch(self, job: Fetch, ctx: JobContext[object]) -> dict[str, str]:
        if job.url == "bad":
            raise RuntimeError("a fetch that always fails")
        return {"url": job.url}

    async def resize(self, job: Resize, ctx: JobContext[object]) -> int:
        assert ctx.workflow is not None
        self.fetched.append(await ctx.workflow.result("fetch"))
        return job.size * 2

    async def join(self, job: Join, ctx: JobContext[object]) -> int:
        flow = ctx.workflow
        assert flow is not None
        assert flow.step == "join"
        assert flow.index is None
        total = 0
        async for outcome in flow.results("resize", page_size=2):
            total += outcome.result or 0
        self.joined.append(total)
        self.failed.append(await flow.failed_dependencies())
        self.waits.append(await flow.wait())
        return total


def registry_of(seen: Seen) -> JobRegistry:
    registry = JobRegistry()
    registry.register("tests.wf.fetch.v1", Fetch, seen.fetch)
    registry.register("tests.wf.resize.v1", Resize, seen.resize)
    registry.register("tests.wf.join.v1", Join, seen.join)
    return registry


def fan(url: str, sizes: range, **join: Any) -> Workflow:
    wf = Workflow("thumbnails", tenant_id="tenant-a", idempotency_key=f"thumbs-{url}")
    wf.add("fetch", Fetch(url), options=DispatchOptions(queue="default", max_attempts=1))
    wf.add_many("resize", [Resize(n) for n in sizes], after=["fetch"], **join.pop("many", {}))
    wf.add("join", Join("all"), after=["resize"], **join)
    return wf


async def test_fan_out_fan_in_reads_results_by_step(store_url: str) -> None:
    seen = Seen()
    async with open_queue(store_url, registry_of(seen), clock=ManualClock()) as queue:
        made = await queue.enqueue_workflow(fan("a.png", range(5)))
        assert not made.already_enqueued
        assert [len(made.step_ids[n]) for n in ("fetch", "resize", "join")] == [1, 5, 1]

        runs = await drain(queue)

        assert len(runs) == 7
        assert {run.outcome for run in runs} == {"completed"}
        assert runs[-1].job_id == made.step_ids["join"][0]
        assert seen.fetched == [{"url": "a.png"}] * 5
        assert seen.joined == [sum(n * 2 for n in range(5))]
        assert seen.failed == [[]]
        assert seen.waits == [None]
        status = await queue.get_workflow(made.workflow_id, "tenant-a")
        assert status is not None
        assert status.state == "completed"
        assert status.counts["completed"] == 7
        step = status.step("resize", 3)
        assert step is not None
        assert step.result == 6
        again = await queue.enqueue_workflow(fan("a.png", range(5)))
        assert again.already_enqueued
        assert again.workflow_id == made.workflow_id
        assert again.step_ids == made.step_ids
        assert await queue.get_workflow(made.workflow_id, "tenant-b") is None
        async with QueueInspector(store_url) as inspector:
            listed = await inspector.list_workflows()
            assert [w.id for w in listed] == [made.workflow_id]
            seen_by_operator = await inspector.get_workflow(made.workflow_id)
            assert seen_by_operator is not None
            assert {s.result for s in seen_by_operator.steps} == {None}


async def test_a_failed_dependency_stops_or_lets_through(store_url: str) -> None:
    seen = Seen()
    async with open_queue(store_url, registry_of(seen), clock=ManualClock()) as queue:
        stopped = await queue.enqueue_workflow(fan("bad", range(2)))
        going = Workflow("lenient", tenant_id="tenant-a")
        going.add("fetch", Fetch("bad"), options=DispatchOptions(queue="default", max_attempts=1))
        going.add("join", Join("anyway"), after=["fetch"], on_failure="continue")
        let_through = await queue.enqueue_workflow(going)

        await drain(queue, advance=True)

        status = await queue.get_workflow(stopped.workflow_id, "tenant-a")
        assert status is not None
        assert status.state == "blocked"
        assert status.counts["blocked"] == 2
        assert status.counts["held"] == 3
        lenient = await queue.get_workflow(let_through.workflow_id, "tenant-a")
        assert lenient is not None
        assert lenient.state == "failed"
        assert [[(d.step, d.state) for d in found] for found in seen.failed] == [
            [("fetch", "dead_letter")]
        ]
        assert await queue.cancel_workflow(stopped.workflow_id, "tenant-a") == 3
        cancelled = await queue.get_workflow(stopped.workflow_id, "tenant-a")
        assert cancelled is not None
        assert cancelled.state == "cancelled"


async def test_a_step_waits_for_its_signal(store_url: str) -> None:
    seen = Seen()
    async with open_queue(store_url, registry_of(seen), clock=ManualClock()) as queue:
        wf = Workflow(tenant_id="tenant-a")
        wf.add("join", Join("approved"), wait_for="approval", timeout=timedelta(days=3))
        made = await queue.enqueue_workflow(wf)
        assert await drain(queue) == []
        assert await queue.signal(made.workflow_id, "approval", {"by": "ops"}, tenant_id="tenant-a")
        assert not await queue.signal(made.workflow_id, "approval", tenant_id="tenant-a")
        runs = await drain(queue)
        assert len(runs) == 1
        (wait,) = seen.waits
        assert (wait.signal, wait.payload, wait.timed_out) == ("approval", {"by": "ops"}, False)


async def test_a_signal_wait_times_out(store_url: str) -> None:
    seen = Seen()
    clock = ManualClock()
    async with open_queue(store_url, registry_of(seen), clock=clock) as queue:
        wf = Workflow(tenant_id="tenant-a")
        wf.add("join", Join("late"), wait_for="approval", timeout=timedelta(hours=1))
        await queue.enqueue_workflow(wf)
        runs = await drain(queue, advance=True)
        assert len(runs) == 1
        (wait,) = seen.waits
        assert (wait.signal, wait.timed_out) == (None, True)


def test_the_sync_queue_enqueues_signals_and_reads(store_url: str) -> None:
    seen = Seen()
    with SyncQueue(store_url, registry_of(seen), clock=ManualClock()) as queue:
        wf = Workflow(tenant_id="tenant-a")
        wf.add("fetch", Fetch("b.png"))
        wf.add("join", Join("signed"), after=["fetch"], wait_for="ok")
        made = queue.enqueue_workflow(wf)
        assert len(drain(queue)) == 1
        assert queue.signal(made.workflow_id, "ok", [1, 2], tenant_id="tenant-a")
        assert len(drain(queue)) == 1
        status = queue.get_workflow(made.workflow_id, "tenant-a")
        assert status is not None
        assert status.state == "completed"
        assert queue.cancel_workflow(made.workflow_id, "tenant-a") == 0
        with pytest.raises(ValidationError) as raised:
            queue.enqueue_workflow(wf, session=object())
        assert raised.value.field == "session"


@dataclasses.dataclass(frozen=True)
class Tally:
    label: str


async def test_a_synchronous_handler_reads_through_the_sync_twins(store_url: str) -> None:
    seen: list[Any] = []

    def tally(job: Tally, ctx: JobContext[object]) -> int:
        flow = ctx.workflow
        assert flow is not None
        seen.append(flow.result_sync("fetch"))
        seen.append([o.result for o in flow.results_sync("resize", page_size=2)])
        seen.append(len(flow.all_results_sync("resize")))
        seen.append((flow.failed_dependencies_sync(), flow.wait_sync()))
        return 1

    registry = registry_of(Seen())
    registry.register("tests.wf.tally.v1", Tally, tally)
    async with open_queue(store_url, registry, clock=ManualClock()) as queue:
        wf = Workflow(tenant_id="tenant-a")
        wf.add("fetch", Fetch("c.png"))
        wf.add_many("resize", [Resize(n) for n in range(5)], after=["fetch"])
        wf.add("tally", Tally("sync"), after=["resize", "fetch"])
        await queue.enqueue_workflow(wf)
        runs = await drain(queue)
        assert {run.outcome for run in runs} == {"completed"}
        assert seen == [{"url": "c.png"}, [0, 2, 4, 6, 8], 5, ([], None)]
