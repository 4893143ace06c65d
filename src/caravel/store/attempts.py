"""The attempt history on the SQL stores, in portable SQLAlchemy Core: the record an outcome
writes, and the trim that keeps a job's history bounded.

Every record is written in the transaction that records its outcome. Once a record's lease
token passes the bound ``keep``, the records of the job's claims older than its last ``keep``
are deleted there too (:func:`trim`), and the statement that changes the job (a completion,
failure, snooze, cancel or claim) adds to ``attempts_dropped`` what that trim deletes
(:func:`counted`, counted before the new record exists). Until then, which is nearly always
(the worker knows every lease token it acknowledges), the outcome's statement is the plain one
and no trim runs. A dialect may fold those writes into the outcome's own statement
(PostgreSQL's data-modifying ``WITH``); the others insert the records after it, in its
transaction: the rows it changed copied by :func:`recorded`, or the records made here
(:func:`record`, :func:`~caravel.store.plans.record_plan`). A claim's records of the leases it
took over are :mod:`caravel.store.claims.takeover`'s; the read is
:func:`caravel.store.queries.attempt_history`.

Only the schema is imported here: the statements of outcomes and claims build on it.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from caravel.attempts import AttemptOutcome
from caravel.jobs import Lease
from caravel.limits import MAX_ATTEMPT_HISTORY
from caravel.store.schema import attempts, jobs, workers
from caravel.store.values import Recorder

__all__ = [
    "CANCEL_KEEP",
    "KEEP",
    "RECORD_COLUMNS",
    "cancelled",
    "counted",
    "cuts",
    "dropped",
    "lease_cuts",
    "record",
    "record_of",
    "recorded",
    "records_deleted",
    "trim",
    "trimming",
]

#: The columns of a record, in the table's order: every record names all of them.
RECORD_COLUMNS = tuple(column.name for column in attempts.c)

#: How many claims' records a job keeps, bound in every statement that records an outcome.
KEEP = sa.bindparam("b_keep", type_=sa.BigInteger())


def dropped(keep: Any = KEEP, token: Any = jobs.c.lease_token) -> sa.ColumnElement[int]:
    """The records of the job being updated that a new record under ``token`` (its lease token
    before the update) pushes out of its last ``keep`` claims, counted before they are
    deleted: 0, without reading them, until the token passes ``keep``."""
    older = sa.and_(attempts.c.job_id == jobs.c.id, attempts.c.lease_token <= token - keep)
    counted = sa.select(sa.func.count()).where(older).scalar_subquery()
    return sa.case((token > keep, counted), else_=sa.literal_column("0"))


def counted(update: sa.Update, keep: Any = KEEP) -> sa.Update:
    """``update`` (of the rows whose lease tokens are the new records') adding to each row's
    ``attempts_dropped`` the records the trim of its history under ``keep`` deletes."""
    return update.values(attempts_dropped=jobs.c.attempts_dropped + dropped(keep))


def trimming(tokens: Iterable[int], keep: int) -> bool:
    """Whether a record under any of ``tokens`` pushes older ones out of the last ``keep``."""
    return any(token > keep for token in tokens)


def record_of(rows: Any, attempt: Any) -> sa.Select[Any]:
    """The records of ``rows`` (a selectable with a job's ``id``, ``lease_token`` and
    ``started_at``), the attempt each was for being ``attempt``, with the fields a batch of
    outcomes shares bound: ``b_worker``, ``b_host``, ``b_pid``, ``b_now`` (when it ended),
    ``b_outcome``, ``b_category``, ``b_error_class``, ``b_detail`` and ``b_retry_at``."""
    return sa.select(
        rows.c.id,
        rows.c.lease_token,
        attempt,
        sa.bindparam("b_worker", type_=sa.Uuid()),
        sa.bindparam("b_host", type_=sa.String()),
        sa.bindparam("b_pid", type_=sa.Integer()),
        rows.c.started_at,
        sa.bindparam("b_now", type_=sa.BigInteger()),
        sa.bindparam("b_outcome", type_=sa.String()),
        sa.bindparam("b_category", type_=sa.String()),
        sa.bindparam("b_error_class", type_=sa.String()),
        sa.bindparam("b_detail", type_=sa.String()),
        sa.bindparam("b_retry_at", type_=sa.BigInteger()),
    )


def recorded() -> sa.Insert:
    """The records of the jobs ``b_done`` names, copied from their rows right after the
    statement that recorded their outcome (which kept each lease's token, attempt and claim
    time), bound as :func:`record_of` is."""
    done = sa.bindparam("b_done", expanding=True, type_=sa.Uuid())
    return sa.insert(attempts).from_select(
        RECORD_COLUMNS, record_of(jobs, jobs.c.attempt).where(jobs.c.id.in_(done))
    )


def record(
    lease: Lease,
    recorder: Recorder,
    now: int,
    outcome: AttemptOutcome,
    *,
    category: str | None = None,
    error_class: str | None = None,
    detail: str | None = None,
    retry_at: int | None = None,
) -> dict[str, Any]:
    """The record of the attempt ``lease`` proves, ended at ``now`` with ``outcome``."""
    return {
        "job_id": lease.job_id,
        "lease_token": lease.token,
        "attempt": lease.attempt,
        "worker_id": recorder.worker_id,
        "host": recorder.host,
        "pid": recorder.pid,
        "claimed_at": lease.claimed_at_ms,
        "finished_at": now,
        "outcome": outcome.value,
        "category": category,
        "error_class": error_class,
        "detail": detail,
        "retry_at": retry_at,
    }


def trim() -> sa.Delete:
    """Delete the records of job ``b_id`` whose lease token is at most ``b_cut``."""
    return sa.delete(attempts).where(
        attempts.c.job_id == sa.bindparam("b_id", type_=sa.Uuid()),
        attempts.c.lease_token <= sa.bindparam("b_cut", type_=sa.BigInteger()),
    )


def cuts(records: Iterable[dict[str, Any]], keep: int) -> list[dict[str, Any]]:
    """The trims (parameters of :func:`trim`) the ``records`` call for under ``keep``."""
    return [
        {"b_id": row["job_id"], "b_cut": row["lease_token"] - keep}
        for row in records
        if row["lease_token"] > keep
    ]


#: What a cancel (an operator's act, with no worker's bound to go by) keeps of a job's history:
#: the most any worker keeps, so a cancel never deletes a record a worker's bound keeps.
CANCEL_KEEP = MAX_ATTEMPT_HISTORY


def cancelled() -> sa.Insert:
    """The records of the running jobs ``b_ids`` a cancel ended at ``b_now``, read after its
    update: the attempt, worker (with its host and process while its registry row is kept) and
    claim time are the row's, the lease token the one before the cancel's."""
    ids = sa.bindparam("b_ids", expanding=True, type_=sa.Uuid())
    record = (
        sa.select(
            jobs.c.id,
            jobs.c.lease_token - 1,
            jobs.c.attempt,
            jobs.c.worker_id,
            workers.c.host,
            workers.c.pid,
            jobs.c.started_at,
            sa.bindparam("b_now", type_=sa.BigInteger()),
            sa.literal(AttemptOutcome.CANCELLED.value),
            sa.cast(sa.null(), attempts.c.category.type),
            sa.cast(sa.null(), attempts.c.error_class.type),
            sa.cast(sa.null(), attempts.c.detail.type),
            sa.cast(sa.null(), attempts.c.retry_at.type),
        )
        .select_from(jobs.outerjoin(workers, workers.c.id == jobs.c.worker_id))
        .where(jobs.c.id.in_(ids))
    )
    return sa.insert(attempts).from_select(RECORD_COLUMNS, record)


def lease_cuts(leases: Iterable[Lease], keep: int, done: Container[UUID]) -> list[dict[str, Any]]:
    """The trims (parameters of :func:`trim`) the records of ``leases`` whose jobs are in
    ``done`` call for under ``keep``."""
    return [
        {"b_id": lease.job_id, "b_cut": lease.token - keep}
        for lease in leases
        if lease.token > keep and lease.job_id in done
    ]


def records_deleted() -> sa.Delete:
    """Delete every record of the jobs ``b_ids`` names (deleted with them)."""
    ids = sa.bindparam("b_ids", expanding=True, type_=sa.Uuid())
    return sa.delete(attempts).where(attempts.c.job_id.in_(ids))
