"""Workflows: ``workflow_insert`` saves every step at once (the ones without dependencies or
waits ready, the rest held), and the statement that finishes a dependency releases each step
whose last wait that was, exactly once; signals, timers, failure policies, cancelling and the
reads a step's handler and operators make."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any
from uuid import UUID

import pytest

from caravel._ids import uuid7
from caravel.clock import from_ms
from caravel.errors import IdempotencyConflictError
from caravel.jobs import JobState, Lease
from caravel.limits import HELD_DUE_AT
from caravel.store.protocol import ReadStore, Store
from caravel.store.pruning import PruneBatch, PruneRequest
from caravel.store.workflows.records import NewStep, NewWorkflow, OnFailure
from caravel.workflows import workflow_state
from tests.store.conformance.builders import (
    T0,
    TENANT,
    claim,
    everything,
    fail,
    new_job,
    ref,
)

#: Far past any real claim's horizon, still before a held step's due time.
FAR = HELD_DUE_AT - 1
T1 = T0 + 60_000


class Graph:
    """Steps of one workflow under construction, by name (a group's members share it)."""

    def __init__(self) -> None:
        self.steps: list[NewStep] = []
        self.ids: dict[str, list[UUID]] = {}

    def add(
        self,
        name: str,
        *,
        after: Sequence[str] = (),
        count: int | None = None,
        on_failure: OnFailure = "stop",
        wait_signal: str | None = None,
        delay_ms: int | None = None,
        timeout_ms: int | None = None,
        tenant: str = TENANT,
    ) -> list[UUID]:
        parents = tuple(job_id for dependency in after for job_id in self.ids[dependency])
        indexes: list[int | None] = [None] if count is None else list(range(count))
        for index in indexes:
            job = new_job(len(self.steps), tenant=tenant)
            self.steps.append(
                NewStep(job, name, index, parents, on_failure, wait_signal, delay_ms, timeout_ms)
            )
            self.ids.setdefault(name, []).append(job.id)
        return self.ids[name]

    def workflow(
        self, *, key: str | None = None, content: str = "a" * 64, tenant: str = TENANT
    ) -> NewWorkflow:
        return NewWorkflow(uuid7(T0), tenant, "wf", key, content, T0, list(self.steps))


async def leases(store: Store, now: int, limit: int = 100) -> dict[UUID, Lease]:
    """Claim every job due at ``now`` (up to ``limit``)."""
    batch = await claim(store, now, limit, source="ready")
    return {job.job_id: job.lease for job in batch.claimed}


async def complete(
    store: Store, held: dict[UUID, Lease], now: int, results: dict[UUID, Any] | None = None
) -> None:
    """Complete every lease of ``held`` in one statement, with ``results`` as JSON."""
    texts = {job_id: json.dumps(value) for job_id, value in (results or {}).items()}
    done = await store.job_complete_many(list(held.values()), now, results=texts)
    assert done == set(held)


async def run(store: Store, job_ids: Sequence[UUID], now: int, result: Any = None) -> None:
    """Claim exactly ``job_ids`` (all due at ``now``, nothing else) and complete them."""
    held = await leases(store, now)
    assert set(held) == set(job_ids), (held, job_ids)
    await complete(store, held, now, {job_id: result for job_id in job_ids})


async def state_of(store: Store, job_id: UUID) -> tuple[str, bool]:
    found = await store.job_find(job_id)
    assert found is not None
    return found.state.value, found.held


async def wf_state(store: ReadStore, workflow_id: UUID) -> str:
    record = await store.workflow_get(workflow_id, TENANT)
    assert record is not None
    return workflow_state(record)


async def test_insert_holds_what_waits(store: Store, reader: ReadStore) -> None:
    g = Graph()
    (a,) = g.add("a")
    (b,) = g.add("b", after=["a"])
    (w,) = g.add("w", wait_signal="go")
    workflow_id, created = await store.workflow_insert(g.workflow())
    assert created
    assert await state_of(store, a) == ("ready", False)
    assert await state_of(store, b) == ("ready", True)
    assert await state_of(store, w) == ("ready", True)
    assert set(await leases(store, FAR)) == {a}
    record = await reader.workflow_get(workflow_id, TENANT)
    assert record is not None
    assert (record.total, record.running, record.held, record.ready) == (3, 1, 2, 0)
    steps = await reader.workflow_steps(workflow_id, TENANT, 10)
    assert [(s.step, s.held, s.waiting) for s in steps] == [
        ("a", False, 0),
        ("b", True, 1),
        ("w", True, 1),
    ]
    assert steps[1].after == (a,)


async def test_idempotent_same_graph_and_conflict(store: Store) -> None:
    g = Graph()
    g.add("a")
    g.add("b", after=["a"])
    first, created = await store.workflow_insert(g.workflow(key="k"))
    assert created
    again = Graph()
    again.add("a")
    again.add("b", after=["a"])
    assert await store.workflow_insert(again.workflow(key="k")) == (first, False)
    assert len(await everything(store)) == 2
    other = Graph()
    other.add("x")
    with pytest.raises(IdempotencyConflictError):
        await store.workflow_insert(other.workflow(key="k", content="b" * 64))
    # All or nothing: the conflicting workflow left no job, step or workflow row.
    assert len(await everything(store)) == 2
    assert [r.id for r in await store.workflow_list(None, 10)] == [first]
    # The key is the tenant's: another tenant's workflow under it is created.
    elsewhere = Graph()
    elsewhere.add("a", tenant="tenant-b")
    _, created = await store.workflow_insert(elsewhere.workflow(key="k", tenant="tenant-b"))
    assert created


@pytest.mark.parametrize("together", [True, False], ids=["one-statement", "one-by-one"])
async def test_fan_out_fan_in_releases_once(store: Store, together: bool) -> None:
    g = Graph()
    (a,) = g.add("a")
    fan = g.add("fan", after=["a"], count=5)
    (join,) = g.add("join", after=["fan"])
    await store.workflow_insert(g.workflow())
    await run(store, [a], T0)
    held = await leases(store, T0 + 1)
    assert set(held) == set(fan)
    if together:
        await complete(store, held, T0 + 2)
    else:
        for n, job_id in enumerate(fan):
            assert await state_of(store, join) == ("ready", True)
            await complete(store, {job_id: held[job_id]}, T0 + 2 + n)
    assert set(await leases(store, FAR)) == {join}
    assert await leases(store, FAR) == {}
    steps = await store.workflow_steps(g.workflow().id, TENANT, 10)
    assert [s.waiting for s in steps if s.step == "join"] in ([0], [])


async def test_diamond(store: Store) -> None:
    g = Graph()
    (a,) = g.add("a")
    (b,) = g.add("b", after=["a"])
    (c,) = g.add("c", after=["a"])
    (d,) = g.add("d", after=["b", "c"])
    workflow_id, _ = await store.workflow_insert(g.workflow())
    await run(store, [a], T0)
    await run(store, [b, c], T0 + 1)
    await run(store, [d], T0 + 2)
    assert await leases(store, FAR) == {}
    assert await wf_state(store, workflow_id) == "completed"
    record = await store.workflow_get(workflow_id, TENANT)
    assert record is not None
    assert record.finished_at == T0 + 2


async def test_stop_and_continue_on_dead_letter_and_replay(store: Store) -> None:
    g = Graph()
    (a,) = g.add("a")
    (s,) = g.add("s", after=["a"])
    (c,) = g.add("c", after=["a"], on_failure="continue")
    workflow_id, _ = await store.workflow_insert(g.workflow())
    (lease,) = (await leases(store, T0)).values()
    await fail(store, lease, T0, None)  # dead-lettered
    assert await state_of(store, s) == ("ready", True)
    assert set(await leases(store, T0 + 1)) == {c}
    failed = await store.workflow_dependencies(c, True, 10)
    assert [(d.job_id, d.step, d.index, d.state) for d in failed] == [(a, "a", None, "dead_letter")]
    assert [d.step for d in await store.workflow_dependencies(s, False, 10)] == ["a"]
    steps = {x.step: x for x in await store.workflow_steps(workflow_id, TENANT, 10)}
    assert steps["s"].blocked
    assert not steps["c"].blocked
    record = await store.workflow_get(workflow_id, TENANT)
    assert record is not None
    assert (record.blocked, record.running) == (1, 1)
    # Replaying the failed step resumes the graph: the stop step once, the other not again.
    assert await store.job_replay(ref(g.steps[0].job), T0 + 2)
    await run(store, [a], T0 + 3)
    assert set(await leases(store, T0 + 4)) == {s}
    assert await leases(store, FAR) == {}


async def test_cancelled_dependency(store: Store) -> None:
    g = Graph()
    (_a,) = g.add("a")
    (s,) = g.add("s", after=["a"])
    (c,) = g.add("c", after=["a"], on_failure="continue")
    workflow_id, _ = await store.workflow_insert(g.workflow())
    await store.job_cancel(ref(g.steps[0].job), T0)
    assert set(await leases(store, T0 + 1)) == {c}
    assert await state_of(store, s) == ("ready", True)
    failed = await store.workflow_dependencies(c, True, 10)
    assert [(d.step, d.state) for d in failed] == [("a", "cancelled")]
    held = await leases(store, FAR)
    assert held == {}
    assert await wf_state(store, workflow_id) == "running"  # c is running


@pytest.mark.parametrize("before", [True, False], ids=["signal-first", "deps-first"])
async def test_signal_before_and_after_dependencies(store: Store, before: bool) -> None:
    g = Graph()
    (a,) = g.add("a")
    (w,) = g.add("w", after=["a"], wait_signal="go")
    workflow_id, _ = await store.workflow_insert(g.workflow())
    if before:
        assert await store.workflow_signal(workflow_id, TENANT, "go", '{"ok":1}', T0)
        assert await state_of(store, w) == ("ready", True)
        await run(store, [a], T0 + 1)
    else:
        await run(store, [a], T0 + 1)
        assert await state_of(store, w) == ("ready", True)
        assert await leases(store, FAR) == {}
        assert await store.workflow_signal(workflow_id, TENANT, "go", '{"ok":1}', T0 + 2)
    assert set(await leases(store, T0 + 2)) == {w}
    wait = await store.workflow_wait(w)
    assert wait is not None
    assert (wait.signal, wait.signal_payload, wait.timed_out) == ("go", '{"ok":1}', False)
    assert await store.workflow_wait(a) is None


async def test_signal_idempotent_and_tenant_scoped(store: Store) -> None:
    g = Graph()
    (w,) = g.add("w", wait_signal="go")
    workflow_id, _ = await store.workflow_insert(g.workflow())
    assert not await store.workflow_signal(workflow_id, "tenant-b", "go", "1", T0)
    assert not await store.workflow_signal(uuid7(T0), TENANT, "go", "1", T0)
    assert await state_of(store, w) == ("ready", True)
    assert await store.workflow_signal(workflow_id, TENANT, "go", "1", T0)
    assert not await store.workflow_signal(workflow_id, TENANT, "go", "2", T0 + 1)
    assert set(await leases(store, T0)) == {w}
    wait = await store.workflow_wait(w)
    assert wait is not None
    assert wait.signal_payload == "1"


async def test_timer_delay(store: Store) -> None:
    g = Graph()
    (a,) = g.add("a")
    (t,) = g.add("t", after=["a"], delay_ms=5_000)
    await store.workflow_insert(g.workflow())
    await run(store, [a], T1)
    found = await store.job_find(t)
    assert found is not None
    assert found.due_at == from_ms(T1 + 5_000)
    assert not found.held
    assert await leases(store, T1 + 4_999) == {}
    assert set(await leases(store, T1 + 5_000)) == {t}


async def test_signal_timeout(store: Store) -> None:
    g = Graph()
    (a,) = g.add("a")
    (w,) = g.add("w", after=["a"], wait_signal="go", timeout_ms=10_000)
    workflow_id, _ = await store.workflow_insert(g.workflow())
    await run(store, [a], T1)
    assert await leases(store, T1 + 9_999) == {}
    assert set(await leases(store, T1 + 10_000)) == {w}
    wait = await store.workflow_wait(w)
    assert wait is not None
    assert (wait.signal, wait.timed_out) == (None, True)
    # The claim won: a signal now changes nothing of the running step.
    assert await store.workflow_signal(workflow_id, TENANT, "go", "1", T1 + 10_001)
    assert await state_of(store, w) == ("running", False)
    wait = await store.workflow_wait(w)
    assert wait is not None
    assert wait.timed_out


@pytest.mark.parametrize("late", [False, True], ids=["before-timeout", "after-timeout"])
async def test_signal_before_claim_wins_over_timeout(store: Store, late: bool) -> None:
    g = Graph()
    (a,) = g.add("a")
    (w,) = g.add("w", after=["a"], wait_signal="go", timeout_ms=10_000)
    workflow_id, _ = await store.workflow_insert(g.workflow())
    await run(store, [a], T1)
    at = T1 + (20_000 if late else 3_000)
    assert await store.workflow_signal(workflow_id, TENANT, "go", '"yes"', at)
    found = await store.job_find(w)
    assert found is not None
    assert found.due_at == from_ms(at)
    assert set(await leases(store, at)) == {w}
    wait = await store.workflow_wait(w)
    assert wait is not None
    assert (wait.signal, wait.signal_payload) == ("go", '"yes"')
    assert not wait.timed_out


async def test_root_wait_with_timeout(store: Store) -> None:
    g = Graph()
    (w,) = g.add("w", wait_signal="go", timeout_ms=1_000)
    await store.workflow_insert(g.workflow())
    assert await leases(store, T0 + 999) == {}
    assert set(await leases(store, T0 + 1_000)) == {w}


async def test_cancel_workflow(store: Store) -> None:
    g = Graph()
    (a,) = g.add("a")
    (b,) = g.add("b")
    (c,) = g.add("c", after=["a"])
    (d,) = g.add("d", after=["b"])
    workflow_id, _ = await store.workflow_insert(g.workflow())
    held = await leases(store, T0)
    await complete(store, {a: held[a]}, T0)  # c is released and ready, b runs, d is held
    assert await store.workflow_cancel(workflow_id, "tenant-b", T0 + 1) == 0
    assert await store.workflow_cancel(workflow_id, TENANT, T0 + 1) == 3
    assert await state_of(store, a) == ("completed", False)
    for job_id in (b, c, d):
        assert (await state_of(store, job_id))[0] == "cancelled"
    record = await store.workflow_get(workflow_id, TENANT)
    assert record is not None
    assert record.cancelled_at == T0 + 1
    assert workflow_state(record) == "cancelled"
    assert await leases(store, FAR) == {}


async def test_results_paging(store: Store, reader: ReadStore) -> None:
    g = Graph()
    fan = g.add("fan", count=5)
    (join,) = g.add("join", after=["fan"])
    workflow_id, _ = await store.workflow_insert(g.workflow())
    held = await leases(store, T0)
    await complete(store, held, T0, {job_id: {"n": n} for n, job_id in enumerate(fan)})
    pages = []
    after = None
    while True:
        page = await reader.workflow_results(workflow_id, TENANT, "fan", after, 2)
        pages.append([(r.index, r.state, json.loads(r.result or "null")) for r in page])
        if len(page) < 2:
            break
        after = page[-1].index
    assert pages == [
        [(0, "completed", {"n": 0}), (1, "completed", {"n": 1})],
        [(2, "completed", {"n": 2}), (3, "completed", {"n": 3})],
        [(4, "completed", {"n": 4})],
    ]
    assert await reader.workflow_results(workflow_id, TENANT, "fan", 4, 2) == []
    assert await reader.workflow_results(workflow_id, "tenant-b", "fan", None, 2) == []
    single = await reader.workflow_results(workflow_id, TENANT, "join", None, 2)
    assert [(r.job_id, r.index, r.state, r.result) for r in single] == [(join, None, "ready", None)]


async def test_states_listing_and_get(store: Store, reader: ReadStore) -> None:
    async def one(n: int, **step: Any) -> tuple[UUID, list[UUID], list[UUID]]:
        g = Graph()
        roots = g.add("a")
        rest = g.add("b", after=["a"], **step)
        new = g.workflow()
        workflow = NewWorkflow(uuid7(T0 + n), TENANT, f"w{n}", None, "c" * 64, T0 + n, new.steps)
        workflow_id, _ = await store.workflow_insert(workflow)
        return workflow_id, roots, rest

    completed, c_roots, c_rest = await one(0)
    failed, f_roots, f_rest = await one(1, on_failure="continue")
    blocked, b_roots, _ = await one(2)
    held = await leases(store, T1)
    await complete(store, {c_roots[0]: held[c_roots[0]]}, T1)
    await fail(store, held[f_roots[0]], T1, None)
    await fail(store, held[b_roots[0]], T1, None)
    assert await wf_state(reader, blocked) == "blocked"
    held = await leases(store, T1 + 1)
    assert set(held) == {c_rest[0], f_rest[0]}
    assert await wf_state(reader, completed) == "running"
    await complete(store, held, T1 + 1)
    assert await wf_state(reader, completed) == "completed"
    assert await wf_state(reader, failed) == "failed"
    listed = await reader.workflow_list(None, 10)
    assert [r.name for r in listed] == ["w2", "w1", "w0"]
    assert [r.name for r in await reader.workflow_list(TENANT, 1, 1)] == ["w1"]
    assert await reader.workflow_list("tenant-b", 10) == []
    record = await reader.workflow_get(failed, None)
    assert record is not None
    assert (record.total, record.completed, record.dead_letter) == (2, 1, 1)
    assert record.finished_at == T1 + 1
    assert await reader.workflow_get(failed, "tenant-b") is None
    blocked_record = await reader.workflow_get(blocked, TENANT)
    assert blocked_record is not None
    assert blocked_record.finished_at is None
    assert JobState.DEAD_LETTER.value == "dead_letter"


async def test_prune_takes_whole_finished_workflows_only(store: Store) -> None:
    day = 86_400_000
    g = Graph()
    (a,) = g.add("a")
    (b,) = g.add("b", after=["a"])
    workflow_id, _ = await store.workflow_insert(g.workflow(key="w"))
    await run(store, [a], T0)
    old = PruneRequest(now=T0 + 10 * day, limit=1_000, completed_before=T0 + 9 * day)
    # b is still ready (released): a, finished long ago, stays with its live workflow.
    assert await store.job_prune(old) == PruneBatch()
    assert await store.job_find(a) is not None
    await run(store, [b], T0 + 8 * day + 1)
    assert await store.job_prune(old) == PruneBatch(deleted=2)
    assert await store.workflow_get(workflow_id, TENANT) is None
    assert await store.workflow_list(None, 10) == []
    # The key outlives the workflow: the same graph is the pruned workflow, another conflicts.
    again = Graph()
    again.add("a")
    again.add("b", after=["a"])
    assert await store.workflow_insert(again.workflow(key="w")) == (workflow_id, False)
    with pytest.raises(IdempotencyConflictError):
        await store.workflow_insert(again.workflow(key="w", content="d" * 64))


async def test_a_fan_in_finished_from_two_stores_at_once_is_released_once(
    store: Store, second_store: Store
) -> None:
    g = Graph()
    fan = g.add("fan", count=12)
    (join,) = g.add("join", after=["fan"])
    await store.workflow_insert(g.workflow())
    held = await leases(store, T0)
    assert set(held) == set(fan)

    async def finish(on: Store, job_ids: list[UUID]) -> None:
        for job_id in job_ids:
            assert await on.job_complete_many([held[job_id]], T0 + 1) == {job_id}

    await asyncio.gather(finish(store, fan[::2]), finish(second_store, fan[1::2]))
    assert set(await leases(store, FAR)) == {join}
    assert await leases(store, FAR) == {}
