"""A page of a job listing with each listed job's latest attempt record, in one statement, in
portable SQLAlchemy Core (the dead-letter page shows what each job's last attempt left).

The page is the plain listing (:func:`caravel.store.queries.job_list`, with its order, limit
and offset) taken as a subquery first, so the record is looked up for the listed jobs only: one
correlated ``max(lease_token)`` per listed job, answered from the history's primary key
``(job_id, lease_token)``. A job's latest record is its newest claim's (lease tokens only grow;
attempt numbers may repeat after a snooze).
"""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import sqlalchemy as sa

from caravel.attempts import AttemptRecord
from caravel.jobs import JobStatus
from caravel.store import queries
from caravel.store.protocol import JobFilter
from caravel.store.rows import attempt_from_row, status_from_row
from caravel.store.schema import attempts

__all__ = ["PREFIX", "listed_from_row", "listing_with_last_attempt"]

#: The record's columns are read under this prefix: several share a name with the job's.
PREFIX = "last_"

_NAMES = tuple(column.name for column in attempts.c)


def listing_with_last_attempt(
    where: JobFilter, queues: Sequence[str] | None = None
) -> sa.Select[Any]:
    """The jobs ``where`` lists (``queues`` as :func:`caravel.store.queries.job_list` takes
    them), in its order, each with its latest attempt record's columns (named with
    :data:`PREFIX`; all null for a job without records)."""
    page = queries.job_list(where, queues).subquery("page")
    newer = attempts.alias("newer")
    latest = (
        sa.select(sa.func.max(newer.c.lease_token))
        .where(newer.c.job_id == page.c.id)
        .scalar_subquery()
    )
    joined = page.outerjoin(
        attempts, sa.and_(attempts.c.job_id == page.c.id, attempts.c.lease_token == latest)
    )
    order = (
        (page.c.created_at.asc(), page.c.id.asc())
        if where.oldest_first
        else (page.c.created_at.desc(), page.c.id.desc())
    )
    record = [attempts.c[name].label(PREFIX + name) for name in _NAMES]
    return sa.select(*page.c, *record).select_from(joined).order_by(*order)


def listed_from_row(row: Any) -> tuple[JobStatus, AttemptRecord | None]:
    """A job's status and its latest record (``None`` without one) from a row of
    :func:`listing_with_last_attempt`."""
    mapping = row._mapping
    if mapping[PREFIX + "lease_token"] is None:
        return status_from_row(row), None
    record = SimpleNamespace(**{name: mapping[PREFIX + name] for name in _NAMES})
    return status_from_row(row), attempt_from_row(record)
