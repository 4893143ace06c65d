"""The statements that insert new jobs on PostgreSQL, and the rows a COPY of them sends."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from caravel.jobs import JobState
from caravel.store.postgresql.notifications import CHANNEL
from caravel.store.protocol import NewJob
from caravel.store.schema import jobs

__all__ = [
    "COPY_COLUMNS",
    "COPY_SQL",
    "COPY_TYPES",
    "INSERTED_HERE",
    "INSERT_ONE",
    "INSERT_ONE_NOTIFY",
    "INSERT_UNNEST",
    "ONE_ROW_FIELDS",
    "SEEN_BEFORE",
    "copy_row",
    "copy_rows",
    "one_row_values",
    "unnest_values",
]

INSERT_UNNEST = sa.text(
    """
    INSERT INTO caravel_jobs (
        id, queue, job_type, tenant_id, idempotency_key, payload, state, attempt,
        max_attempts, due_at, available_at, lease_token, created_at, updated_at, trace_context,
        tags, priority, timeout_ms, partition_key, weight
    )
    SELECT id, queue, job_type, tenant_id, key, payload, 'ready', 0,
           max_attempts, due, due, 0, created, created, trace, tags, priority, timeout_ms,
           partition, weight
    FROM unnest(
        CAST(:ids AS uuid[]), CAST(:queues AS text[]), CAST(:job_types AS text[]),
        CAST(:tenants AS text[]), CAST(:keys AS text[]), CAST(:payloads AS text[]),
        CAST(:max_attempts AS integer[]), CAST(:due AS bigint[]), CAST(:created AS bigint[]),
        CAST(:traces AS text[]), CAST(:tags AS text[]), CAST(:priorities AS smallint[]),
        CAST(:timeouts AS integer[]),
        CAST(:partitions AS text[]), CAST(:weights AS integer[])
    ) AS new (
        id, queue, job_type, tenant_id, key, payload, max_attempts, due, created, trace, tags,
        priority, timeout_ms, partition, weight
    )
    ON CONFLICT DO NOTHING
    """
)

#: After a batch insert that skipped rows: which of the batch's ids this transaction inserted (a
#: skipped job may share its id with an older row, as when a relay resends an intent).
INSERTED_HERE = sa.text(
    "SELECT id FROM caravel_jobs WHERE id = ANY(CAST(:ids AS uuid[])) "
    "AND xmin = pg_current_xact_id()::xid"
)

#: Whether a row already holds a job's id or idempotency key (checked for the first job of a
#: COPY, so that a batch submitted again goes straight to the path that skips such rows).
SEEN_BEFORE = sa.text(
    "SELECT EXISTS (SELECT FROM caravel_jobs WHERE id = CAST(:id AS uuid)) "
    "OR EXISTS (SELECT FROM caravel_jobs WHERE queue = CAST(:queue AS text) "
    "AND tenant_id = CAST(:tenant_id AS text) AND idempotency_key = CAST(:key AS text))"
)


def unnest_values(new_jobs: Sequence[NewJob]) -> dict[str, Any]:
    """The parameters of :data:`INSERT_UNNEST` for ``new_jobs``: one array per column."""
    return {
        "ids": [j.id for j in new_jobs],
        "queues": [j.queue for j in new_jobs],
        "job_types": [j.job_type for j in new_jobs],
        "tenants": [j.tenant_id for j in new_jobs],
        "keys": [j.idempotency_key for j in new_jobs],
        "payloads": [j.payload for j in new_jobs],
        "max_attempts": [j.max_attempts for j in new_jobs],
        "due": [j.due_at for j in new_jobs],
        "created": [j.created_at for j in new_jobs],
        "traces": [j.trace_context for j in new_jobs],
        "tags": [j.tags for j in new_jobs],
        "priorities": [j.priority for j in new_jobs],
        "timeouts": [j.timeout_ms for j in new_jobs],
        "partitions": [j.partition_key for j in new_jobs],
        "weights": [j.weight for j in new_jobs],
    }


_READY = JobState.READY.value

#: The columns a COPY of new jobs fills, in the order of :func:`copy_row`: each with the binary
#: format it is sent in and the :class:`NewJob` field it takes, those of a new job's constant
#: values last.
_COPIED = (
    ("id", "uuid", "id"),
    ("queue", "text", "queue"),
    ("job_type", "text", "job_type"),
    ("tenant_id", "text", "tenant_id"),
    ("idempotency_key", "text", "idempotency_key"),
    ("payload", "text", "payload"),
    ("max_attempts", "int4", "max_attempts"),
    ("due_at", "int8", "due_at"),
    ("available_at", "int8", "due_at"),
    ("created_at", "int8", "created_at"),
    ("updated_at", "int8", "created_at"),
    ("trace_context", "text", "trace_context"),
    ("tags", "text", "tags"),
    ("priority", "int2", "priority"),
    ("timeout_ms", "int4", "timeout_ms"),
    ("partition_key", "text", "partition_key"),
    ("weight", "int4", "weight"),
)
_CONSTANT = (("state", "text", _READY), ("attempt", "int4", 0), ("lease_token", "int8", 0))
COPY_COLUMNS = tuple((name, kind) for name, kind, _ in (*_COPIED, *_CONSTANT))
COPY_SQL = (
    f"COPY {jobs.name} ({', '.join(name for name, _ in COPY_COLUMNS)}) FROM STDIN (FORMAT BINARY)"
)
COPY_TYPES = [kind for _, kind in COPY_COLUMNS]

#: A job's copied fields as one tuple (one C call, a field taken twice where two columns
#: start out equal), and the constant values that follow them.
_FROM_JOB = operator.itemgetter(*(NewJob._fields.index(field) for _, _, field in _COPIED))
_CONSTANTS = tuple(value for _, _, value in _CONSTANT)


def copy_row(job: NewJob) -> tuple[Any, ...]:
    """A new job's row as COPY sends it: the same values as an INSERT of the job."""
    return _FROM_JOB(job) + _CONSTANTS  # type: ignore[no-any-return]


def copy_rows(new_jobs: Iterable[NewJob]) -> Iterator[tuple[Any, ...]]:
    """:func:`copy_row` of each job, with no Python call per job."""
    return map(operator.add, map(_FROM_JOB, new_jobs), itertools.repeat(_CONSTANTS))


#: The fields of a :class:`NewJob` that are columns (named after them), in its order; the
#: others say how to insert it.
ONE_ROW_FIELDS = tuple(name for name in NewJob._fields if name in jobs.c)
#: A job's values for :data:`INSERT_ONE`: its column fields, as one tuple (one C call).
one_row_values = operator.itemgetter(*(NewJob._fields.index(name) for name in ONE_ROW_FIELDS))


def _one_row_insert() -> str:
    """INSERT of one job whose parameters are the :class:`NewJob`'s column fields, field by
    field (:func:`one_row_values`); the columns it does not carry are those of a new job. No
    RETURNING: the row count says whether the job went in."""
    fields = ", ".join(ONE_ROW_FIELDS)
    dialect = postgresql.dialect()  # type: ignore[no-untyped-call]

    def cast(name: str) -> str:
        # To the column's type without its length: a cast to VARCHAR(64) would cut a longer
        # text short, where the column itself refuses it.
        kind = jobs.c[name].type
        unbounded = sa.String() if isinstance(kind, sa.String) else kind
        return f"%b::{unbounded.compile(dialect)}"

    casts = ", ".join(cast(name) for name in ONE_ROW_FIELDS)
    return (
        f"INSERT INTO {jobs.name} ({fields}, state, attempt, available_at, lease_token,"
        f" updated_at) SELECT {fields}, '{_READY}', 0, due_at, 0, created_at"
        f" FROM (VALUES ({casts})) AS new ({fields}) ON CONFLICT DO NOTHING"
    )


#: One job, inserted unless a row already holds its id or idempotency key.
INSERT_ONE = _one_row_insert()

#: The same INSERT, also sending the queue's NOTIFY when the job went in (for a job due now):
#: one round trip. Its row count, too, says whether the job went in.
INSERT_ONE_NOTIFY = (
    f"WITH inserted AS ({INSERT_ONE} RETURNING queue)"
    f" SELECT pg_notify('{CHANNEL}', queue) FROM inserted"
)
