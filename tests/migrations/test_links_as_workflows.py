"""Migration 0022 (chains and batches become workflows) on every database: a chain and a batch
saved before it, part run, finish after it as they would have, released by the workflow
triggers; and one saved after it finishes below it again, released by the old triggers. The
downgrade takes nothing."""

from __future__ import annotations

import json
from collections.abc import Sequence
from uuid import UUID

import sqlalchemy as sa

from caravel import migrate
from caravel._ids import uuid7
from caravel.jobs import JobState
from caravel.limits import HELD_DUE_AT
from caravel.store import open_store
from caravel.store.links import LinkedJob, NewBatch
from caravel.store.protocol import Store
from caravel.store.rows import linked_row
from caravel.store.schema import batches, jobs
from tests.store.conformance.builders import T0, TENANT, chain, claim, new_job, status
from tests.support.databases import sync_engine


def _saved_as_before(url: str, rows: Sequence[dict[str, object]], batch: NewBatch) -> None:
    """What ``chain_insert`` and ``batch_insert`` wrote before 0022: the jobs with their links,
    and the batch's row; no workflow."""
    engine = sync_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.insert(jobs), list(rows))
            conn.execute(
                sa.insert(batches),
                {
                    "id": batch.id,
                    "tenant_id": batch.tenant_id,
                    "total": batch.total,
                    "callback_id": batch.callback_id,
                    "created_at": batch.created_at,
                    "updated_at": batch.created_at,
                },
            )
    finally:
        engine.dispose()


def _run(url: str, *statements: str) -> None:
    engine = sync_engine(url)
    try:
        with engine.begin() as conn:
            for statement in statements:
                conn.exec_driver_sql(statement)
            if url.startswith("mariadb"):  # the old trigger's asks, made by hand above
                conn.exec_driver_sql("DELETE FROM caravel_releases")
    finally:
        engine.dispose()


def _hex(job_id: UUID, url: str) -> str:
    return job_id.hex if url.startswith("sqlite") else str(job_id)


async def _finish(store: Store, now: int, expected: set[UUID], result: str = "5") -> None:
    """Claim what is claimable at ``now`` (exactly ``expected``) and complete it with ``result``."""
    claimed = (await claim(store, now, 10)).claimed
    assert {job.job_id for job in claimed} == expected
    results = {job.job_id: result for job in claimed}
    done = await store.job_complete_many([job.lease for job in claimed], now, results=results)
    assert done == expected


async def test_a_chain_and_a_batch_from_before_0022_finish_after_it(empty_url: str) -> None:
    migrate.upgrade(empty_url, "0021")
    steps = [new_job(n) for n in range(3)]
    made = [new_job(10 + n) for n in range(3)]
    last = new_job(20)
    batch = NewBatch(uuid7(T0), TENANT, len(made), last.id, T0)
    linked = [
        *chain(steps),
        *(LinkedJob(job, batch_id=batch.id) for job in made),
        LinkedJob(last, held=True),
    ]
    _saved_as_before(empty_url, [linked_row(one) for one in linked], batch)
    # Before the upgrade: the chain's first step completed and released the second (as the
    # old trigger did it); one member of the batch was dead-lettered.
    first, second, member = (_hex(x.id, empty_url) for x in (steps[0], steps[1], made[0]))
    _run(
        empty_url,
        "UPDATE caravel_jobs SET state = 'completed', result = '2', available_at = NULL,"
        f" finished_at = {T0 + 1}, updated_at = {T0 + 1} WHERE id = '{first}'",
        f"UPDATE caravel_jobs SET due_at = {T0 + 1}, available_at = {T0 + 1},"
        f" upstream = '{{\"result\":2}}' WHERE id = '{second}'",
        "UPDATE caravel_jobs SET state = 'dead_letter', available_at = NULL,"
        f" finished_at = {T0 + 1}, updated_at = {T0 + 1} WHERE id = '{member}'",
    )

    migrate.upgrade(empty_url)
    assert migrate.check(empty_url).differences == ()

    opened = open_store(empty_url)
    store = opened.inner
    try:
        await _finish(store, T0 + 10, {steps[1].id, made[1].id, made[2].id}, "7")
        assert (await status(store, last)).state is JobState.READY
        claimed = {job.job_id: job for job in (await claim(store, T0 + 20, 10)).claimed}
        assert set(claimed) == {steps[2].id, last.id}
        assert json.loads(claimed[steps[2].id].upstream or "") == {"result": 7}
        handed = json.loads(claimed[last.id].upstream or "")
        counts = {"total": 3, "completed": 2, "dead_letter": 1, "cancelled": 0}
        assert {**handed["batch"], "batch_id": None} == {**counts, "batch_id": None}
        assert UUID(str(handed["batch"]["batch_id"])) == batch.id
        got = await store.batch_get(batch.id, TENANT)
        assert got is not None
        assert (got.completed, got.dead_letter, got.finished_at) == (2, 1, T0 + 10)
        flows = await store.workflow_list(None, 10)
        assert sorted(flow.name or "" for flow in flows) == ["batch", "chain"]
    finally:
        await opened.close()

    report = migrate.downgrade(empty_url, "0021")  # nothing to lose, no force needed
    assert report.losses == ()


async def test_a_chain_and_a_batch_from_after_0022_finish_below_it(empty_url: str) -> None:
    migrate.upgrade(empty_url)
    steps = [new_job(n) for n in range(2)]
    made = [new_job(10 + n) for n in range(2)]
    last = new_job(20)
    opened = open_store(empty_url)
    try:
        await opened.inner.chain_insert(chain(steps))
        batch = NewBatch(uuid7(T0), TENANT, len(made), last.id, T0)
        members = [LinkedJob(job, batch_id=batch.id) for job in made]
        await opened.inner.batch_insert(batch, members, LinkedJob(last, held=True))
    finally:
        await opened.close()

    assert migrate.downgrade(empty_url, "0021").losses == ()
    engine = sync_engine(empty_url)
    try:
        with engine.connect() as conn:
            left = conn.exec_driver_sql(
                "SELECT (SELECT count(*) FROM caravel_workflows)"
                " + (SELECT count(*) FROM caravel_workflow_steps)"
                " + (SELECT count(*) FROM caravel_workflow_edges)"
                " + (SELECT count(*) FROM caravel_jobs WHERE workflow_id IS NOT NULL)"
            )
            assert left.scalar_one() == 0
    finally:
        engine.dispose()

    if empty_url.startswith("mariadb"):
        return  # below 0022 the store this code is releases on MariaDB no more (see below)
    opened = open_store(empty_url)
    store = opened.inner
    try:
        await _finish(store, T0 + 10, {steps[0].id, made[0].id, made[1].id})
        claimed = {job.job_id: job for job in (await claim(store, T0 + 20, 10)).claimed}
        assert set(claimed) == {steps[1].id, last.id}
        assert json.loads(claimed[steps[1].id].upstream or "") == {"result": 5}
        assert json.loads(claimed[last.id].upstream or "")["batch"]["completed"] == 2
        assert (await status(store, last)).due_at.timestamp() * 1000 < HELD_DUE_AT
    finally:
        await opened.close()
    migrate.upgrade(empty_url)
    assert migrate.check(empty_url).current == migrate.head()
