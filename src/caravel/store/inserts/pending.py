""" "One pending per key" on the SQL stores: the statements that settle a job with a pending key
against the one job pending under it, and the plan that runs them (on the store's connections
and on the caller's alike, see :mod:`caravel.store.plans`).

The partial unique index ``uq_caravel_jobs_pending`` over ready rows with a key is the arbiter
of an ``INSERT ... ON CONFLICT``: the database itself settles two producers racing on one key.
Both dialects write the upsert in the same SQLAlchemy construct (their own ``insert``, passed
in), with the index's predicate as the conflict target's ``WHERE``.

A job that returns to ready (a retry, a snooze, a replay) while another job is pending under
its key keeps running but gives up its key (:func:`kept_key`), so nothing accepted is lost.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.visitors import InternalTraversal

from caravel.errors import PendingKeyConflictError, StoreError
from caravel.jobs import JobState
from caravel.store.plans import Plan, Step
from caravel.store.rows import job_row
from caravel.store.schema import jobs
from caravel.store.values import InsertOutcome, NewJob

__all__ = [
    "PENDING_INDEX",
    "PENDING_TARGET",
    "PendingUnder",
    "kept_key",
    "pending_plan",
    "returning_key",
    "settle_plan",
    "split_pending",
    "upsert_keep",
    "upsert_replace",
    "with_key_given_up",
]

T = TypeVar("T")

READY = JobState.READY.value
#: The state as literal SQL, so the planner can match the partial index (a bound value cannot be
#: proven to equal the index's 'ready' in a generic plan).
_READY_SQL: sa.ColumnElement[str] = sa.literal_column(f"'{READY}'")
#: The unique index that holds each queue's, tenant's and key's one pending job.
PENDING_INDEX = "uq_caravel_jobs_pending"
#: The index's columns, as a conflict target names them.
PENDING_TARGET = ("queue", "tenant_id", "pending_key")
#: The index's predicate, as its conflict target names it (written as the index is).
_PREDICATE = sa.text(f"pending_key IS NOT NULL AND state = '{READY}'")
#: How many times an insert is tried again when the pending job it met was claimed before it
#: could be read (each retry needs another producer or worker to win a race on the same key).
_ATTEMPTS = 20


class PendingUnder(ColumnElement[bool]):
    """Whether a row of ``table`` (the jobs table or an alias of it) is the job pending under
    ``key``: written as the partial unique index's predicate, so the planner matches the index
    (MariaDB, which indexes the pending key of ready rows as a generated column, writes it as
    that column's value, see :mod:`caravel.store.mariadb.compiling`)."""

    __visit_name__ = "pending_under"
    inherit_cache = True
    _traverse_internals = [  # noqa: RUF012  (SQLAlchemy's own declaration is a list)
        ("table", InternalTraversal.dp_clauseelement),
        ("value", InternalTraversal.dp_clauseelement),
    ]
    type = sa.Boolean()
    # A comparison, not a boolean value: written in a WHERE as it is (not as ``... = 1``).
    _is_implicitly_boolean = True

    def __init__(self, table: sa.FromClause, key: Any) -> None:
        self.table = table
        self.value = sa.literal(key, type_=jobs.c.pending_key.type) if isinstance(key, str) else key


@compiles(PendingUnder)
def _pending_under(element: PendingUnder, compiler: Any, **kw: Any) -> str:
    columns = element.table.c
    written = sa.and_(columns.pending_key == element.value, columns.state == _READY_SQL)
    text: str = compiler.process(written, **kw)
    return text


def split_pending(new_jobs: Sequence[NewJob]) -> tuple[list[NewJob], list[NewJob]]:
    """``new_jobs`` split into those without a pending key and those with one (in order)."""
    plain = [job for job in new_jobs if job.pending_key is None]
    if len(plain) == len(new_jobs):
        return plain, []
    return plain, [job for job in new_jobs if job.pending_key is not None]


def settle_plan(
    new_jobs: Sequence[NewJob],
    plain: Callable[[Sequence[NewJob]], Plan[list[InsertOutcome]]],
    keep: Any,
    replace: Any,
) -> Plan[list[InsertOutcome]]:
    """Each job inserted or settled against the row that kept it out, outcomes in the call's
    order: the jobs without a pending key together (by ``plain``, the store's own insert), then
    those with one, one by one (a key may come twice in a call, and one upsert cannot touch a
    row twice). Those go in order of their queue, tenant and key, each key's jobs in the call's
    order: two calls settling the same keys then wait for each other's index entries in the
    same order, and never deadlock."""
    unkeyed, keyed = split_pending(new_jobs)
    if not keyed:
        return (yield from plain(new_jobs))
    settled = iter((yield from plain(unkeyed)) if unkeyed else [])
    positions = [n for n, job in enumerate(new_jobs) if job.pending_key is not None]
    positions.sort(key=lambda n: _scope(new_jobs[n]))  # stable: a key's jobs keep their order
    by_position: dict[int, InsertOutcome] = {}
    for n in positions:
        by_position[n] = yield from pending_plan(keep, replace, new_jobs[n])
    return [
        next(settled) if job.pending_key is None else by_position[n]
        for n, job in enumerate(new_jobs)
    ]


def _scope(job: NewJob) -> tuple[str, str, str]:
    return (job.queue, job.tenant_id, job.pending_key or "")


def upsert_keep(insert: Any) -> Any:
    """A job's row inserted unless a job is pending under its key (then nothing changes);
    returns the id inserted. Bound by column name, as :func:`~caravel.store.rows.job_row`."""
    return (
        insert.on_conflict_do_nothing(index_elements=PENDING_TARGET, index_where=_PREDICATE)
    ).returning(jobs.c.id)


def upsert_replace(insert: Any) -> Any:
    """A job's row inserted, or, when a job of its type is pending under its key, that job given
    its payload, trace context and due time (never later than its creation plus ``b_debounce``
    ms); returns the id inserted or replaced. A pending job of another type is left alone (and
    nothing is returned)."""
    new = insert.excluded
    cap = jobs.c.created_at + sa.bindparam("b_debounce", type_=sa.BigInteger())
    due = sa.case((new.due_at < cap, new.due_at), else_=cap)
    return insert.on_conflict_do_update(
        index_elements=PENDING_TARGET,
        index_where=_PREDICATE,
        set_={
            "payload": new.payload,
            "due_at": due,
            "available_at": due,
            "trace_context": new.trace_context,
            "updated_at": new.created_at,
        },
        where=jobs.c.job_type == new.job_type,
    ).returning(jobs.c.id)


def _pending_now(job: NewJob) -> sa.Select[Any]:
    """The job pending under ``job``'s key, if any."""
    return sa.select(jobs.c.id, jobs.c.job_type).where(
        jobs.c.queue == job.queue,
        jobs.c.tenant_id == job.tenant_id,
        PendingUnder(jobs, job.pending_key),
    )


def pending_plan(keep: Any, replace: Any, job: NewJob) -> Plan[InsertOutcome]:
    """Settle one job with a pending key: inserted, or the pending job returned (keep) or given
    its content (replace). ``keep`` and ``replace`` are the dialect's :func:`upsert_keep` and
    :func:`upsert_replace`. Raises :class:`~caravel.errors.PendingKeyConflictError` when a job
    of another type is pending under the key."""
    replacing = job.debounce_ms is not None
    values = job_row(job)
    if replacing:
        values["b_debounce"] = job.debounce_ms
    for _ in range(_ATTEMPTS):
        rows = yield Step(replace if replacing else keep, values)
        if rows:
            found = rows[0].id
            return InsertOutcome(found, inserted=found == job.id, replaced=found != job.id)
        pending = yield Step(_pending_now(job))
        if not pending:
            continue  # claimed since the insert met it: the key is free again
        row = pending[0]
        if row.job_type != job.job_type:
            raise PendingKeyConflictError(row.id, job.queue)
        if not replacing:
            return InsertOutcome(row.id, inserted=False)
        # A job of this type became pending after the upsert looked: settle against it.
    raise StoreError("job_insert", "the pending job under a key kept changing")


def kept_key() -> sa.ColumnElement[Any]:
    """The ``pending_key`` of a row an update makes ready again: its own, unless another job is
    pending under it now (then ``NULL``: the row gives up its key rather than break the
    index)."""
    other = jobs.alias("pending")
    taken = (
        sa.select(sa.literal(1))
        .where(
            other.c.queue == jobs.c.queue,
            other.c.tenant_id == jobs.c.tenant_id,
            PendingUnder(other, jobs.c.pending_key),
            other.c.id != jobs.c.id,
        )
        .exists()
    )
    return sa.case(
        (jobs.c.pending_key.is_(None), sa.null()), (taken, sa.null()), else_=jobs.c.pending_key
    )


def returning_key(give_up: bool) -> sa.ColumnElement[Any]:
    """The pending key of a row an update makes ready again: given up, or :func:`kept_key`."""
    return sa.null() if give_up else kept_key()


async def with_key_given_up(
    run: Callable[[bool], Awaitable[T]], is_pending_conflict: Callable[[BaseException], bool]
) -> T:
    """``run(give_up)``, an update that makes rows ready again with the pending key
    :func:`returning_key` gives: first keeping their keys where no other job is pending under
    them; and if a job under the same key was inserted by a transaction that committed while
    the update ran (the index then refuses the row), once more with the keys given up."""
    try:
        return await run(False)
    except StoreError as exc:
        if exc.__cause__ is None or not is_pending_conflict(exc.__cause__):
            raise
    return await run(True)
