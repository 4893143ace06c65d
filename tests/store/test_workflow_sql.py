"""Workflows on the SQL stores: the release triggers of migration 0021 (on MariaDB the store's
release pass) and the store's inserts, signals, cancels and reads, end to end on each database.
The conformance suite checks the same behaviour on every store; these look at what only the
SQL stores have (the step rows, the edges, a release made exactly once)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from caravel._ids import uuid7
from caravel.errors import IdempotencyConflictError
from caravel.jobs import JobState
from caravel.limits import HELD_DUE_AT
from caravel.store import open_store
from caravel.store.protocol import NewJob
from caravel.store.workflows.records import NewStep, NewWorkflow
from tests.store.conformance.builders import T0, TENANT, claim, fail, new_job, ref, status
from tests.store.conformance.conftest import DATABASES

FAR = HELD_DUE_AT - 1
SQL = ("sqlite", "postgresql", "mariadb")


@pytest.fixture(params=SQL)
def sql_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return DATABASES[request.param](request, tmp_path)


@pytest.fixture
async def store(sql_url: str) -> AsyncIterator[Any]:
    opened = open_store(sql_url)
    try:
        yield opened.inner
    finally:
        await opened.close()


def step(
    name: str,
    n: int,
    after: Sequence[NewJob] = (),
    *,
    index: int | None = None,
    **options: Any,
) -> NewStep:
    return NewStep(new_job(n), name, index, tuple(job.id for job in after), **options)


def workflow(*steps: NewStep, key: str | None = None, digest: str = "a" * 64) -> NewWorkflow:
    return NewWorkflow(uuid7(T0), TENANT, "test", key, digest, T0, list(steps))


async def finish(store: Any, job: NewJob, now: int, result: str | None = None) -> None:
    """Claim what is claimable at ``now``, which must be ``job`` alone, and complete it."""
    await finish_each(store, now, [job], {job.id: result} if result is not None else None)


async def finish_each(
    store: Any, now: int, order: Sequence[NewJob], results: dict[UUID, str] | None = None
) -> None:
    """Claim what is claimable at ``now``, which must be ``order``'s jobs, and complete them
    one by one in that order."""
    batch = await claim(store, now, 100)
    leases = {c.job_id: c.lease for c in batch.claimed}
    assert set(leases) == {job.id for job in order}
    for job in order:
        given = None if results is None or job.id not in results else {job.id: results[job.id]}
        assert await store.job_complete_many([leases[job.id]], now, results=given) == {job.id}


async def claimable(store: Any, now: int) -> set[UUID]:
    """The ids claimable at ``now`` (claimed, then left to their leases)."""
    return {c.job_id for c in (await claim(store, now, 1000, source="ready")).claimed}


async def test_a_diamond_runs_each_step_after_all_of_its_dependencies(store: Any) -> None:
    a = step("a", 0)
    b = step("b", 1, [a.job])
    c = step("c", 2, [a.job])
    d = step("d", 3, [b.job, c.job])
    wf = workflow(a, b, c, d)
    assert await store.workflow_insert(wf) == (wf.id, True)
    record = await store.workflow_get(wf.id, TENANT)
    assert (record.total, record.ready, record.held) == (4, 1, 3)

    await finish(store, a.job, T0 + 10, '"A"')
    assert (await status(store, b.job)).due_at.timestamp() * 1000 == T0 + 10
    running = {c.job_id: c.lease for c in (await claim(store, T0 + 20, 10)).claimed}
    assert set(running) == {b.job.id, c.job.id}
    await store.job_complete_many([running[b.job.id]], T0 + 20)
    assert (await status(store, d.job)).held  # c still runs before it
    await store.job_complete_many([running[c.job.id]], T0 + 30)
    await finish(store, d.job, T0 + 40)

    record = await store.workflow_get(wf.id, TENANT)
    assert (record.completed, record.ready, record.held, record.finished_at) == (4, 0, 0, T0 + 40)
    steps = await store.workflow_steps(wf.id, TENANT, 10)
    assert [(s.step, s.state, s.waiting) for s in steps] == [
        ("a", "completed", 0),
        ("b", "completed", 0),
        ("c", "completed", 0),
        ("d", "completed", 0),
    ]
    assert set(steps[3].after) == {b.job.id, c.job.id}


async def test_a_failed_dependency_blocks_stop_steps_and_releases_continue_ones(
    store: Any,
) -> None:
    a = NewStep(new_job(0, max_attempts=1), "a", None, ())
    stop = step("stop", 1, [a.job])
    go = step("go", 2, [a.job], on_failure="continue")
    wf = workflow(a, stop, go)
    await store.workflow_insert(wf)

    (claimed,) = (await claim(store, T0 + 10, 1)).claimed
    await fail(store, claimed.lease, T0 + 10, None)
    assert (await status(store, a.job)).state is JobState.DEAD_LETTER
    assert await claimable(store, FAR) == {go.job.id}
    record = await store.workflow_get(wf.id, TENANT)
    assert (record.blocked, record.dead_letter) == (1, 1)
    (blocked,) = [s for s in await store.workflow_steps(wf.id, TENANT, 10) if s.step == "stop"]
    assert blocked.blocked
    assert blocked.held
    failed = await store.workflow_dependencies(go.job.id, True, 10)
    assert [(f.step, f.state, f.satisfied) for f in failed] == [("a", "dead_letter", True)]

    # A replay that completes the dependency releases the stopped step, and nothing twice.
    assert await store.job_replay(ref(a.job), T0 + 20)
    await finish(store, a.job, FAR - 5)
    assert stop.job.id in await claimable(store, FAR)


async def test_a_chain_step_is_handed_its_dependency_s_result(store: Any) -> None:
    first = step("first", 0)
    second = step("second", 1, [first.job], hands_result=True)
    wf = workflow(first, second)
    await store.workflow_insert(wf)
    await finish(store, first.job, T0 + 10, '{"n":1}')
    batch = await claim(store, T0 + 20, 10)
    (claimed,) = batch.claimed
    assert json.loads(claimed.upstream or "null") == {
        "result": {"n": 1},
        "workflow": {"id": str(wf.id), "step": "second", "index": None},
    }


async def test_a_signal_releases_its_step_once_and_a_repeat_changes_nothing(store: Any) -> None:
    a = step("a", 0)
    wait = step("wait", 1, [a.job], wait_signal="approved")
    wf = workflow(a, wait)
    await store.workflow_insert(wf)
    await finish(store, a.job, T0 + 10)
    assert await claimable(store, FAR) == set()  # dependencies done, the signal not yet

    assert not await store.workflow_signal(wf.id, "other-tenant", "approved", "1", T0 + 20)
    assert await store.workflow_signal(wf.id, TENANT, "approved", '{"ok":true}', T0 + 20)
    assert not await store.workflow_signal(wf.id, TENANT, "approved", "2", T0 + 21)
    assert await claimable(store, T0 + 20) == {wait.job.id}
    got = await store.workflow_wait(wait.job.id)
    assert (got.signal, got.signal_payload, got.timed_out) == ("approved", '{"ok":true}', False)


async def test_a_wait_times_out_and_a_late_signal_moves_it_to_now(store: Any) -> None:
    a = step("a", 0)
    wait = step("wait", 1, [a.job], wait_signal="go", timeout_ms=60_000)
    wf = workflow(a, wait)
    await store.workflow_insert(wf)
    await finish(store, a.job, T0 + 10)
    assert (await status(store, wait.job)).due_at.timestamp() * 1000 == T0 + 60_010
    assert await store.workflow_signal(wf.id, TENANT, "go", "null", T0 + 100)
    assert (await status(store, wait.job)).due_at.timestamp() * 1000 == T0 + 100


async def test_the_same_key_returns_the_workflow_and_another_graph_conflicts(store: Any) -> None:
    wf = workflow(step("a", 0), key="nightly")
    assert await store.workflow_insert(wf) == (wf.id, True)
    again = workflow(step("a", 1), key="nightly")
    assert await store.workflow_insert(again) == (wf.id, False)
    other = workflow(step("a", 2), key="nightly", digest="b" * 64)
    with pytest.raises(IdempotencyConflictError):
        await store.workflow_insert(other)


async def test_cancel_cancels_what_has_not_finished(store: Any) -> None:
    a = step("a", 0)
    b = step("b", 1, [a.job])
    c = step("c", 2, [b.job], on_failure="continue")
    wf = workflow(a, b, c)
    await store.workflow_insert(wf)
    assert await store.workflow_cancel(wf.id, TENANT, T0 + 5) == 3
    record = await store.workflow_get(wf.id, TENANT)
    assert (record.cancelled, record.cancelled_at, record.finished_at) == (3, T0 + 5, T0 + 5)
    assert await claimable(store, FAR) == set()


async def test_results_page_through_a_group_by_index(store: Any) -> None:
    members = [step("resize", n, index=n) for n in range(7)]
    wf = workflow(*members)
    await store.workflow_insert(wf)
    results = {m.job.id: str(m.index) for m in members}
    await finish_each(store, T0 + 10, [m.job for m in members], results)
    seen: list[int | None] = []
    after: int | None = None
    while page := await store.workflow_results(wf.id, TENANT, "resize", after, 3):
        seen += [r.index for r in page]
        assert [r.result for r in page] == [str(r.index) for r in page]
        after = page[-1].index
    assert seen == list(range(7))
