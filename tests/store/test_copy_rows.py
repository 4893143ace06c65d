"""PostgreSQL's COPY of new jobs, its one-job INSERT and its other INSERTs must write the same
row."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from caravel.options import QueueOptions
from caravel.preparation import prepare_job
from caravel.store.base import SqlStore
from caravel.store.postgresql.insert_statements import COPY_COLUMNS, copy_row
from caravel.store.protocol import NewJob
from caravel.store.schema import jobs
from tests.support import Add, dispatch, engine_of, make_registry, open_queue


def test_a_copied_row_holds_what_an_insert_of_the_job_holds() -> None:
    job = prepare_job(
        make_registry(), QueueOptions(), Add(5, note="n"), dispatch("key"), 1_700_000_000_123
    )
    job = job._replace(
        trace_context='{"traceparent":"00-1-2-01"}',
        due_at=1_700_000_009_000,
        tags=",a,b:1,",
        priority=-42,
    )
    copied = dict(zip((name for name, _ in COPY_COLUMNS), copy_row(job), strict=True))
    # A job with a pending key never takes COPY (it is settled one by one), so COPY leaves the
    # column to its NULL default.
    assert {**copied, "pending_key": None} == SqlStore._row_values(job)
    # Every column the COPY names exists, and is sent in the binary format of its type.
    for name, kind in COPY_COLUMNS:
        column_type = jobs.c[name].type
        if isinstance(column_type, sa.Uuid):
            expected = "uuid"
        elif isinstance(column_type, sa.String):
            expected = "text"
        elif isinstance(column_type, sa.BigInteger):
            expected = "int8"
        elif isinstance(column_type, sa.SmallInteger):
            expected = "int2"
        else:
            assert isinstance(column_type, sa.Integer), name
            expected = "int4"
        assert kind == expected, name


def _job(n: int, key: str | None) -> NewJob:
    job = prepare_job(
        make_registry(), QueueOptions(), Add(n, note="n"), dispatch(key), 1_700_000_000_123
    )
    # Every job carries a trace context of its own: with a tracer set up in this process (the
    # telemetry tests'), one left empty would get the insert span's.
    job = job._replace(trace_context=f'{{"traceparent":"00-{n}-2-01"}}')
    if n % 2:  # a delayed job, and one due now
        job = job._replace(due_at=1_700_000_009_000)
    if n % 3:  # tagged, and untagged
        job = job._replace(tags=f",batch,n:{n},")
    if n % 4:  # a priority of its own (both signs, next to other small integers), and the default
        job = job._replace(priority=n * (-1) ** n)
    return job


@pytest.mark.postgres
@pytest.mark.parametrize("total", [1, 2, 20], ids=["one_row", "values", "copy"])
async def test_every_insert_strategy_writes_the_row_of_the_job(pg_url: str, total: int) -> None:
    # The one-job INSERT binds the job's own fields by position: a field out of step with its
    # column would store a value in the wrong column, or fail only for some jobs.
    new_jobs = [_job(n, f"key-{n}" if n % 3 else None) for n in range(1, total + 1)]
    async with open_queue(pg_url) as queue:
        await queue.store.job_insert_many([new_jobs], total=total)
        async with engine_of(queue).connect() as conn:
            rows = (await conn.execute(sa.select(jobs))).mappings().all()
    stored = {row["id"]: dict(row) for row in rows}
    assert len(stored) == total
    untouched = {
        "lease_expires_at": None,
        "started_at": None,
        "finished_at": None,
        "result": None,
        "error_class": None,
        "snoozes": 0,
        "cancel_requested_at": None,
        "content_hash": None,
        "pruned_at": None,
        # Not carried by NewJob yet (revision 0007 added the column).
        "pending_key": None,  # these jobs have none
        # A chain's or batch's links: never set by a plain insert.
        "chain_id": None,
        "chain_step": None,
        "chain_next": None,
        "batch_id": None,
        "upstream": None,
        "workflow_id": None,
        # What running handlers and their claims write later (revision 0015).
        "worker_id": None,
        "progress": None,
        "progress_at": None,
        "meta": None,
        "attempts_dropped": 0,
        # Drawn by each claim (revision 0018).
        "lease_nonce": None,
    }
    for job in new_jobs:
        assert stored[job.id] == {**SqlStore._row_values(job), **untouched, "last_failure": None}
