"""The operator's picture of a workflow (:mod:`caravel.workflows.nodes`) and its drawing
(:mod:`caravel.web.workflow_graph`), from statuses built here: one node per step name, layers,
the words that say why a step is not done, and a graph that stays one box per group."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from uuid import UUID

from caravel.web.workflow_graph import MAX_DRAWN, graph_svg
from caravel.workflows import WorkflowStatus, WorkflowStep
from caravel.workflows.nodes import counts_words, shown_counts, step_nodes, wait_words

_ids = iter(range(1, 10**9))


def _step(name: str, index: int | None = None, **fields: object) -> WorkflowStep:
    values: dict[str, object] = {
        "job_id": UUID(int=next(_ids)),
        "queue": "q",
        "job_type": "t",
        "step": name,
        "index": index,
        "state": "ready",
        "held": False,
        "blocked": False,
        "waiting": 0,
        "on_failure": "stop",
        "wait_signal": None,
        "signal_received": False,
        "delay": None,
        "timeout": None,
        "after": (),
    }
    values.update(fields)
    return WorkflowStep(**values)  # type: ignore[arg-type]


def _status(steps: list[WorkflowStep]) -> WorkflowStatus:
    return WorkflowStatus(
        id=UUID(int=0),
        name=None,
        tenant_id="t",
        state="running",
        total=len(steps),
        counts={},
        created_at=datetime(2030, 1, 1, tzinfo=UTC),
        finished_at=None,
        cancelled_at=None,
        steps=steps,
    )


def test_a_group_is_one_node_with_its_counts_and_the_most_urgent_state() -> None:
    fetch = _step("fetch", state="completed")
    members = [
        _step("resize", i, state=state, after=(fetch.job_id,))
        for i, state in enumerate(["completed"] * 9_997 + ["running", "dead_letter", "ready"])
    ]
    (first, group) = step_nodes(_status([fetch, *members]))
    assert (first.step, first.layer, first.state) == ("fetch", 0, "completed")
    assert (group.step, group.group, group.members, group.layer) == ("resize", True, 10_000, 1)
    assert group.state == "dead_letter"
    assert (group.counts["completed"], group.counts["running"], group.counts["ready"]) == (
        9_997,
        1,
        1,
    )
    assert [m.label for m in group.failed] == ["resize[9998]"]
    assert group.after == ("fetch",)
    assert group.reasons == (
        "1 of 10000 members dead-lettered; replaying resumes the steps it stopped",
    )


def test_a_blocked_step_names_the_failed_dependencies() -> None:
    parts = [_step("part", i, state=s) for i, s in enumerate(["dead_letter"] * 5 + ["completed"])]
    join = _step(
        "join", state="ready", held=True, blocked=True, after=tuple(p.job_id for p in parts)
    )
    nodes = {n.step: n for n in step_nodes(_status([*parts, join]))}
    assert nodes["join"].state == "blocked"
    assert nodes["join"].reasons == (
        "blocked: 5 dependencies failed: part[0] (dead-lettered), part[1] (dead-lettered), "
        "part[2] (dead-lettered) and 2 more; replay the dead-lettered to resume "
        "(on_failure is stop)",
    )
    cancelled = _step("gone", state="cancelled")
    after = _step("after", held=True, blocked=True, after=(cancelled.job_id,))
    (_, node) = step_nodes(_status([cancelled, after]))
    assert node.reasons == (
        "blocked: gone was cancelled; a cancelled step does not run again (on_failure is stop)",
    )


def test_waits_for_dependencies_a_signal_and_a_timer() -> None:
    fetch = _step("fetch", state="running")
    approve = _step(
        "approve",
        held=True,
        waiting=2,
        after=(fetch.job_id,),
        wait_signal="approved",
        timeout=timedelta(days=3),
    )
    publish = _step(
        "publish", held=True, waiting=1, after=(approve.job_id,), delay=timedelta(minutes=90)
    )
    nodes = {n.step: n for n in step_nodes(_status([publish, approve, fetch]))}
    assert [n.step for n in step_nodes(_status([publish, approve, fetch]))] == [
        "fetch",
        "approve",
        "publish",
    ]
    assert nodes["approve"].reasons == (
        "waits for fetch (running)",
        "waits for signal 'approved', at most 3 d after its dependencies finish (then it runs "
        "timed out)",
    )
    assert nodes["publish"].reasons == (
        "waits for approve (waiting)",
        "timer: runs no earlier than 90 min after its dependencies finished",
    )
    released = _step("late", state="ready", wait_signal="go", timeout=timedelta(hours=2))
    (node,) = step_nodes(_status([released]))
    assert node.state == "held"  # released by its timeout, still waiting for the signal
    assert node.reasons == (
        "waits for signal 'go': its dependencies finished, so it runs timed out 2 h after that "
        "unless the signal comes first",
    )


def test_a_chain_of_twenty_thousand_steps_is_laid_out_at_once() -> None:
    steps = [_step("s0")]
    for n in range(1, 20_000):
        steps.append(_step(f"s{n}", held=True, waiting=1, after=(steps[-1].job_id,)))
    started = time.perf_counter()
    nodes = step_nodes(_status(list(reversed(steps))))
    assert time.perf_counter() - started < 5
    assert [n.layer for n in nodes[:3]] == [0, 1, 2]
    assert nodes[-1].layer == 19_999
    assert graph_svg(nodes) == ""  # more than MAX_DRAWN names: the table alone


def test_the_graph_draws_each_name_once_and_escapes_nothing_it_should_not() -> None:
    fetch = _step("fetch", state="completed")
    group = [_step("a.b-c_d:e", i, after=(fetch.job_id,)) for i in range(3)]
    svg = str(graph_svg(step_nodes(_status([fetch, *group]))))
    assert svg.count('class="node node-') == 2
    assert 'data-from="fetch" data-to="a.b-c_d:e"' in svg
    assert "\u00d73" in svg
    assert len(step_nodes(_status([_step(f"n{i}") for i in range(MAX_DRAWN)]))) == MAX_DRAWN
    assert graph_svg(step_nodes(_status([_step(f"n{i}") for i in range(MAX_DRAWN)]))) != ""


def test_counts_in_words_show_each_step_once() -> None:
    counts = {"ready": 1, "held": 3, "blocked": 1, "running": 0, "completed": 4, "dead_letter": 1}
    assert shown_counts(counts)["held"] == 2
    assert counts_words(counts) == "1 dead-lettered, 1 blocked, 1 ready, 2 waiting, 4 completed"
    assert [wait_words(timedelta(seconds=s)) for s in (45, 90, 3600, 86_400 * 3, 1.5)] == [
        "45 s",
        "90 s",
        "1 h",
        "3 d",
        "1.5 s",
    ]
