"""Migration 0021 (workflows) on every database: a downgrade below it refuses while a workflow
step is held or a workflow is recorded; forced, it dead-letters the held steps (``ReleaseLost``)
and keeps their jobs as plain jobs."""

from __future__ import annotations

import pytest

from caravel import DowngradeRefusedError, migrate
from caravel._ids import uuid7
from caravel.store import open_store
from caravel.store.workflows.records import NewStep, NewWorkflow
from tests.store.conformance.builders import T0, TENANT, new_job
from tests.support.databases import sync_engine


async def _held_workflow(url: str) -> None:
    first, second = new_job(0), new_job(1)
    steps = [NewStep(first, "first", None, ()), NewStep(second, "second", None, (first.id,))]
    store = open_store(url)
    try:
        workflow = NewWorkflow(uuid7(T0), TENANT, "w", "key", "a" * 64, T0, steps)
        assert (await store.inner.workflow_insert(workflow))[1]  # type: ignore[attr-defined]
    finally:
        await store.close()


def _rows(url: str, query: str) -> list[tuple[object, ...]]:
    engine = sync_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(row) for row in conn.exec_driver_sql(query)]
    finally:
        engine.dispose()


async def test_held_workflow_steps_refuse_and_forced_become_dead_letters(empty_url: str) -> None:
    migrate.upgrade(empty_url)
    await _held_workflow(empty_url)

    with pytest.raises(DowngradeRefusedError) as caught:
        migrate.downgrade(empty_url, "0020")
    assert caught.value.counts == {"held_workflow_steps": 1, "workflows": 1}
    assert migrate.current(empty_url) == migrate.head()

    report = migrate.downgrade(empty_url, "0020", force=True)

    assert [(x.kind, x.rows, x.fate) for x in report.losses] == [
        ("held_workflow_steps", 1, "dead_lettered"),
        ("workflows", 1, "deleted"),
    ]
    states = _rows(empty_url, "SELECT state, last_failure FROM caravel_jobs ORDER BY created_at")
    assert sorted(states, key=repr) == sorted(
        [("ready", None), ("dead_letter", "ReleaseLost")], key=repr
    )
    migrate.upgrade(empty_url)  # and back up again
    assert migrate.check(empty_url).current == migrate.head()
