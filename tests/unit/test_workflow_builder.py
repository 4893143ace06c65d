"""The workflow builder and its enqueue refuse every graph that breaks a rule with a
:class:`~caravel.errors.WorkflowError` naming the step and the rule, and write nothing."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from caravel import (
    DispatchOptions,
    JobContext,
    JobRegistry,
    UnknownJobTypeError,
    ValidationError,
    Workflow,
    WorkflowContext,
    WorkflowError,
)
from caravel._ids import uuid7
from caravel.limits import MAX_WORKFLOW_EDGES, MAX_WORKFLOW_STEPS
from caravel.options import QueueOptions
from caravel.queue import DatabaseQueue
from caravel.store.protocol import JobFilter
from caravel.testing import ManualClock
from caravel.workflows import prepare_workflow


@dataclasses.dataclass(frozen=True)
class Step:
    n: int


async def _handle(job: Step, ctx: JobContext[Any]) -> None:
    del job, ctx


def registry() -> JobRegistry:
    found = JobRegistry()
    found.register("tests.wfstep.v1", Step, _handle)
    return found


async def refused(wf: Workflow, step: str | None, words: str) -> None:
    """Enqueueing ``wf`` raises a WorkflowError naming ``step`` whose rule says ``words``,
    and the queue holds nothing after."""
    queue = DatabaseQueue("memory://", registry(), clock=ManualClock())
    try:
        with pytest.raises(WorkflowError) as raised:
            await queue.enqueue_workflow(wf)
        assert raised.value.step == step
        assert words in raised.value.rule
        assert isinstance(raised.value, ValidationError)
        assert "\n" not in str(raised.value)
        assert await queue.store.job_list(JobFilter(limit=10)) == []
        assert await queue.store.workflow_list(None, 10) == []
    finally:
        await queue.close()


def test_add_refuses_at_once() -> None:
    wf = Workflow()
    wf.add("a", Step(1))
    cases: list[tuple[str | None, str, Any]] = [
        ("a", "unique", lambda: wf.add("a", Step(2))),
        (None, "1 to 128", lambda: wf.add("bad name", Step(2))),
        (None, "1 to 128", lambda: wf.add("x" * 129, Step(2))),
        ("b", "after", lambda: wf.add("b", Step(2), after=["no way"])),
        ("b", "itself", lambda: wf.add("b", Step(2), after=["b"])),
        ("b", "list", lambda: wf.add("b", Step(2), after="a")),  # type: ignore[arg-type]
        ("b", "wait_for", lambda: wf.add("b", Step(2), timeout=timedelta(hours=1))),
        ("b", "on_failure", lambda: wf.add("b", Step(2), on_failure="skip")),  # type: ignore[arg-type]
        ("b", "at least one", lambda: wf.add_many("b", [])),
        (
            "b",
            "idempotency key",
            lambda: wf.add("b", Step(2), options=DispatchOptions(queue="q", idempotency_key="k")),
        ),
        (
            "b",
            "pending key",
            lambda: wf.add("b", Step(2), options=DispatchOptions(queue="q", pending_key="k")),
        ),
        (
            "b",
            "tenant",
            lambda: wf.add("b", Step(2), options=DispatchOptions(queue="q", tenant_id="other")),
        ),
        (
            "b",
            "delay=",
            lambda: wf.add(
                "b", Step(2), options=DispatchOptions(queue="q", delay=timedelta(seconds=1))
            ),
        ),
    ]
    for step, words, call in cases:
        with pytest.raises(WorkflowError) as raised:
            call()
        assert raised.value.step == step, words
        assert words in raised.value.rule, raised.value.rule
    assert [s.name for s in wf.steps] == ["a"]


def test_a_steps_options_take_the_workflows_tenant() -> None:
    wf = Workflow(tenant_id="acme", queue="work")
    wf.add("a", Step(1))
    wf.add("b", Step(2), options=DispatchOptions(queue="other"))
    a, b = wf.steps
    assert (a.jobs[0][1].queue, a.jobs[0][1].tenant_id) == ("work", "acme")
    assert (b.jobs[0][1].queue, b.jobs[0][1].tenant_id) == ("other", "acme")


async def test_a_cycle_names_a_step_on_it() -> None:
    wf = Workflow()
    wf.add("start", Step(0))
    wf.add("a", Step(1), after=["start", "c"])
    wf.add("b", Step(2), after=["a"])
    wf.add("c", Step(3), after=["b"])
    await refused(wf, "a", "cycle")


async def test_an_unknown_dependency_is_named() -> None:
    wf = Workflow()
    wf.add("a", Step(1), after=["ghost"])
    await refused(wf, "a", "'ghost'")


async def test_too_many_steps() -> None:
    wf = Workflow()
    wf.add_many("many", [Step(n) for n in range(MAX_WORKFLOW_STEPS)])
    with pytest.raises(WorkflowError) as raised:
        wf.add("one", Step(0))
    assert raised.value.step == "one"
    assert str(MAX_WORKFLOW_STEPS) in raised.value.rule


async def test_too_many_edges() -> None:
    wf = Workflow()
    wf.add_many("left", [Step(n) for n in range(400)])
    wf.add_many("right", [Step(n) for n in range(MAX_WORKFLOW_EDGES // 400 + 1)], after=["left"])
    await refused(wf, "right", "edges")


async def test_an_empty_workflow_and_a_bad_job_are_refused() -> None:
    await refused(Workflow(), None, "at least one step")
    wf = Workflow()
    wf.add("a", Step(1))
    wf.add("b", Step(2), options=DispatchOptions(queue="q", max_attempts=1))
    wf.add_many("c", [Step(3), "not a job"], after=["a"])  # type: ignore[list-item]
    queue = DatabaseQueue("memory://", registry(), clock=ManualClock())
    try:
        with pytest.raises(UnknownJobTypeError):
            await queue.enqueue_workflow(wf)
        assert await queue.store.job_list(JobFilter(limit=10)) == []
    finally:
        await queue.close()


def test_the_same_graph_hashes_the_same() -> None:
    def build(order: list[str]) -> Workflow:
        wf = Workflow("same")
        for name in order:
            wf.add(name, Step(len(name)), after=["a"] if name != "a" else [])
        return wf

    options = QueueOptions()
    first = prepare_workflow(registry(), options, build(["a", "bb", "ccc"]), 1)
    second = prepare_workflow(registry(), options, build(["a", "ccc", "bb"]), 2)
    other = prepare_workflow(registry(), options, build(["a", "bb"]), 3)
    assert first.content_hash == second.content_hash != other.content_hash


async def test_the_blocking_reads_refuse_an_event_loop() -> None:
    queue = DatabaseQueue("memory://", registry(), clock=ManualClock())
    try:
        flow = WorkflowContext(
            queue.store,
            workflow_id=uuid7(0),
            step="s",
            index=None,
            job_id=uuid7(0),
            tenant_id="default",
        )
        with pytest.raises(WorkflowError) as raised:
            flow.result_sync("other")
        assert raised.value.step == "s"
        assert "await" in raised.value.rule
        with pytest.raises(WorkflowError) as unknown:
            await flow.result("other")
        assert unknown.value.step == "other"
    finally:
        await queue.close()
