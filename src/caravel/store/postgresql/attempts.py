"""PostgreSQL's attempt history: the statement that records an outcome, and the claim that
takes over expired leases, each write their attempt records themselves, in a data-modifying
``WITH`` (see :mod:`caravel.store.attempts`). No statement is added to the acknowledgement, and
a claim of ready jobs alone stays its plain ``UPDATE``.

Every part of such a statement reads the rows as they were when it began, so the claim's ``old``
part still sees who held each expired lease and when it began and ended, while its ``UPDATE``
part gives the job its new lease.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY

from caravel.attempts import AttemptOutcome
from caravel.jobs import FailureCategory, JobState
from caravel.store import claims
from caravel.store.attempts import KEEP, RECORD_COLUMNS, counted, record_of
from caravel.store.claims.sources import Lock
from caravel.store.schema import attempts, jobs, workers
from caravel.store.values import ClaimSource

__all__ = ["claim_taking_over", "recording"]

RUNNING = JobState.RUNNING.value


def _trim(done: Any, *also: sa.ColumnElement[bool]) -> sa.CTE:
    """Delete, for each row of ``done`` (``id``, ``lease_token``: a record's), its job's
    records of claims older than its last ``b_keep``."""
    return (
        sa.delete(attempts)
        .where(
            attempts.c.job_id == done.c.id,
            done.c.lease_token > KEEP,
            attempts.c.lease_token <= done.c.lease_token - KEEP,
            *also,
        )
        .cte("trimmed")
    )


def recording(
    update: sa.Update, *, given_back: bool = False, trimming: bool = False
) -> sa.Select[Any]:
    """``update`` (an outcome's statement returning the ids it changed) with one record per
    changed job, bound as :func:`caravel.store.attempts.record_of` binds it: the attempt its
    lease was for (``given_back``: the update gave it back, so it is the row's plus one),
    claimed at the row's ``started_at``. With ``trimming``, each job's history is trimmed to
    its last ``b_keep`` claims too (and the update counts what goes). Returns the ids, as
    ``update`` did."""
    if trimming:
        update = counted(update)
    attempt = jobs.c.attempt + 1 if given_back else jobs.c.attempt
    done = update.returning(jobs.c.lease_token, attempt.label("attempt_no"), jobs.c.started_at).cte(
        "done"
    )
    record = record_of(done, done.c.attempt_no)
    parts = [sa.insert(attempts).from_select(RECORD_COLUMNS, record).cte("recorded")]
    if trimming:
        parts.append(_trim(done))
    return sa.select(done.c.id).add_cte(*parts)


def claim_taking_over(source: ClaimSource, lock: Lock) -> sa.Select[Any]:
    """The plain claim of ``source`` (which may take expired leases over), bound as
    :func:`caravel.store.claims.claim` is with ``b_limit`` left to the caller, that records the
    attempt of each expired lease it takes over or dead-letters: the attempt, token and worker
    of the lease, claimed at the row's old ``started_at`` and ended at its old expiry, with the
    worker's host and process while its registry row is kept. Returns what the claim returns.

    The picked ids are handed over as one array (as the plain claim's are), read once: by the
    claim's ``UPDATE``, and by ``old``, which reads those rows as they were."""
    picked: list[sa.CTE] = []

    def target(candidates: sa.Select[Any]) -> sa.ColumnElement[bool]:
        rows = candidates.subquery("picked")
        ids = sa.select(sa.func.array_agg(rows.c.id).label("ids")).cte("picked_ids")
        picked.append(ids)
        return _in(ids)

    claimed = claims.claim(source, target, lock, literal_limit=False).cte("claimed")
    old = (
        sa.select(
            jobs.c.id,
            jobs.c.lease_token,
            jobs.c.attempt,
            jobs.c.worker_id,
            jobs.c.started_at,
            jobs.c.lease_expires_at,
        )
        .where(_in(picked[0]), jobs.c.state == sa.literal_column(f"'{RUNNING}'"))
        .cte("old")
    )
    record = sa.select(
        old.c.id,
        old.c.lease_token,
        old.c.attempt,
        old.c.worker_id,
        workers.c.host,
        workers.c.pid,
        old.c.started_at,
        old.c.lease_expires_at,
        sa.literal(AttemptOutcome.LEASE_EXPIRED.value),
        sa.literal(FailureCategory.LEASE_EXPIRED.value),
        sa.cast(sa.null(), attempts.c.error_class.type),
        sa.cast(sa.null(), attempts.c.detail.type),
        sa.cast(sa.null(), attempts.c.retry_at.type),
    ).select_from(
        old.join(claimed, claimed.c.id == old.c.id).outerjoin(
            workers, workers.c.id == old.c.worker_id
        )
    )
    lost = sa.insert(attempts).from_select(RECORD_COLUMNS, record).cte("lost")
    taken = sa.exists().where(claimed.c.id == old.c.id)
    return sa.select(*claimed.c).add_cte(lost, _trim(old, taken))


def _in(ids: sa.CTE) -> sa.ColumnElement[bool]:
    """The rows whose ids the array ``ids`` holds, answered from the primary key."""
    array = sa.select(ids.c.ids).scalar_subquery()
    return jobs.c.id == sa.any_(sa.cast(array, ARRAY(sa.Uuid())))
