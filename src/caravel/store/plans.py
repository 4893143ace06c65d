"""Operations written once for every kind of connection.

An operation that must run both on the store's own connections and on a connection the caller
owns (``enqueue(..., session=...)``) is written as a *plan*: a generator that yields each
statement with its parameters and is sent the statement's rows. :func:`run_plan` drives a plan
on an async connection, :func:`run_plan_sync` on a blocking one, so the SQL, the idempotency
lookup and the conflict rule exist once, whichever side of the sync/async line the caller is on.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any, NamedTuple, TypeVar
from uuid import UUID

import sqlalchemy as sa

from caravel.errors import IdempotencyConflictError
from caravel.store import attempts, queries
from caravel.store.protocol import InsertOutcome, NewJob
from caravel.store.schema import attempts as attempts_table

__all__ = ["Plan", "Step", "outcomes_plan", "record_plan", "run_plan", "run_plan_sync"]

T = TypeVar("T")


class Step(NamedTuple):
    """One statement of a plan and its parameters: a dict, a list of dicts (one execution per
    dict, as ``executemany``), or ``None``."""

    statement: Any
    parameters: Any = None


#: An operation written once for every kind of connection: it yields :class:`Step` objects and
#: is sent each step's rows (objects with attribute access, as SQLAlchemy rows).
Plan = Generator[Step, list[Any], T]


async def run_plan(execute: Callable[[Any, Any], Any], plan: Plan[T]) -> T:
    """Drive ``plan`` with ``execute(statement, parameters)``, an async call returning a
    SQLAlchemy result (a connection's ``execute``)."""
    rows: list[Any] | None = None
    try:
        while True:
            step = plan.send(rows) if rows is not None else next(plan)
            result = await execute(step.statement, step.parameters)
            rows = list(result.all()) if getattr(result, "returns_rows", True) else []
    except StopIteration as done:
        value: T = done.value
        return value


def run_plan_sync(execute: Callable[[Any, Any], Any], plan: Plan[T]) -> T:
    """:func:`run_plan` for a blocking ``execute``."""
    rows: list[Any] | None = None
    try:
        while True:
            step = plan.send(rows) if rows is not None else next(plan)
            result = execute(step.statement, step.parameters)
            rows = list(result.all()) if getattr(result, "returns_rows", True) else []
    except StopIteration as done:
        value: T = done.value
        return value


# ----- the plans the SQL stores share ----------------------------------------------------------


def record_plan(records: Sequence[dict[str, Any]], keep: int) -> Plan[None]:
    """Insert attempt ``records`` (:func:`caravel.store.attempts.record`) and trim their jobs'
    histories to their last ``keep`` claims; the statement that recorded the outcomes counted
    what goes (:func:`caravel.store.attempts.dropped`)."""
    if not records:
        return
    yield Step(sa.insert(attempts_table), list(records))
    trims = attempts.cuts(records, keep)
    if trims:
        yield Step(attempts.trim(), trims)


def outcomes_plan(
    new_jobs: Sequence[NewJob], inserted: set[UUID], chunk: int
) -> Plan[list[InsertOutcome]]:
    """Each job's outcome once a batch is inserted: its own row, or the row that kept it out.
    Raises :class:`~caravel.errors.IdempotencyConflictError` (rolling the batch back) when that
    row has other content. Lookups go ``chunk`` keys or ids at a time."""
    duplicates = [job for job in new_jobs if job.id not in inserted]
    by_key, by_id = yield from _existing_plan(duplicates, chunk)
    outcomes: list[InsertOutcome] = []
    for job in new_jobs:
        if job.id in inserted:
            outcomes.append(InsertOutcome(job.id, inserted=True))
            continue
        key = (job.queue, job.tenant_id, job.idempotency_key)
        row = by_key.get(key) if job.idempotency_key is not None else None
        row = row if row is not None else by_id[job.id]
        if not queries.same_content(row, job):
            raise IdempotencyConflictError(row.id)  # rolls the whole batch back
        outcomes.append(InsertOutcome(row.id, inserted=False))
    return outcomes


def _existing_plan(
    duplicates: Sequence[NewJob], chunk: int
) -> Plan[tuple[dict[tuple[str, str, str | None], Any], dict[UUID, Any]]]:
    """The rows that kept ``duplicates`` from being inserted: by idempotency key where the job
    has one, and by id (for a job inserted before under the same id)."""
    keys = sorted(
        {(j.queue, j.tenant_id, j.idempotency_key) for j in duplicates if j.idempotency_key},
        key=lambda k: (k[0], k[1], k[2] or ""),
    )
    ids = sorted({j.id for j in duplicates})
    by_key: dict[tuple[str, str, str | None], Any] = {}
    by_id: dict[UUID, Any] = {}
    for start in range(0, len(keys), chunk):
        for row in (yield Step(queries.existing_by_key(keys[start : start + chunk]))):
            by_key[(row.queue, row.tenant_id, row.idempotency_key)] = row
    for start in range(0, len(ids), chunk):
        for row in (yield Step(queries.existing_by_id(ids[start : start + chunk]))):
            by_id[row.id] = row
    return by_key, by_id
