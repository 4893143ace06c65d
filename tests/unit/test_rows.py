"""A new job's row: every insert path names the same columns."""

from __future__ import annotations

from uuid import uuid4

from caravel.store.protocol import NewJob
from caravel.store.rows import job_row, job_row_columns
from caravel.store.schema import jobs


def test_the_row_names_exactly_its_columns_and_the_rest_keep_their_defaults() -> None:
    job = NewJob(uuid4(), "q", "t.v1", "tenant", None, "{}", 3, 10, 5)
    row = job_row(job)
    assert tuple(row) == job_row_columns()
    left_out = set(jobs.c.keys()) - set(row)
    # Every column a new row leaves out is nullable or has a server default.
    for name in left_out:
        column = jobs.c[name]
        assert column.nullable or column.server_default is not None, name
