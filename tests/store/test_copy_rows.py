"""PostgreSQL's COPY of new jobs and its INSERT must write the same row."""

from __future__ import annotations

import sqlalchemy as sa

from caravel.options import QueueOptions
from caravel.preparation import prepare_job
from caravel.store.base import SqlStore
from caravel.store.postgresql.insert_statements import COPY_COLUMNS, copy_row
from caravel.store.schema import jobs
from tests.support import Add, dispatch, make_registry


def test_a_copied_row_holds_what_an_insert_of_the_job_holds() -> None:
    job = prepare_job(
        make_registry(), QueueOptions(), Add(5, note="n"), dispatch("key"), 1_700_000_000_123
    )
    job = job._replace(trace_context='{"traceparent":"00-1-2-01"}', due_at=1_700_000_009_000)
    copied = dict(zip((name for name, _ in COPY_COLUMNS), copy_row(job), strict=True))
    assert copied == SqlStore._row_values(job)
    # Every column the COPY names exists, and is sent in the binary format of its type.
    for name, kind in COPY_COLUMNS:
        column_type = jobs.c[name].type
        if isinstance(column_type, sa.Uuid):
            expected = "uuid"
        elif isinstance(column_type, sa.String):
            expected = "text"
        elif isinstance(column_type, sa.BigInteger):
            expected = "int8"
        else:
            assert isinstance(column_type, sa.Integer), name
            expected = "int4"
        assert kind == expected, name
