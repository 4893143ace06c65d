"""What a claim records of the leases it takes over: the attempt each expired lease was for, as
``lease_expired``, written in the claim's transaction (see :mod:`caravel.store.attempts`).

Once the claim's ``UPDATE`` has run, the row no longer says who held the lease or when it began
and ended. A dialect that can read the rows before the update in the same statement does so
(PostgreSQL's data-modifying ``WITH``); the others read the expired candidates first
(:func:`expired_before`: the rows the claim's own reading of expired leases picks, so a superset
of those it takes) and record those the claim returned (:func:`taking_over`). A claim of ready
jobs alone takes over nothing and runs no more than its ``UPDATE``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from caravel.attempts import AttemptOutcome
from caravel.jobs import FailureCategory, JobState
from caravel.store.claims.sources import due_ids, no_lock
from caravel.store.plans import Plan, Step, record_plan
from caravel.store.schema import jobs, workers

__all__ = ["expired_before", "lost", "taking_over"]

RUNNING = JobState.RUNNING.value
LEASE_EXPIRED = AttemptOutcome.LEASE_EXPIRED.value


def expired_before(scan: Any) -> sa.Select[Any]:
    """What the first ``scan`` running jobs of ``b_queue`` whose lease expired at ``b_now``
    hold (the ones a claim of expired leases reads, in its order), with the worker that held
    each lease (host and process, while its registry row is kept)."""
    now = sa.bindparam("b_now", type_=sa.BigInteger())
    picked = due_ids("expired", now, scan, no_lock).scalar_subquery()
    return (
        sa.select(
            jobs.c.id,
            jobs.c.lease_token,
            jobs.c.attempt,
            jobs.c.worker_id,
            workers.c.host,
            workers.c.pid,
            jobs.c.started_at,
            jobs.c.lease_expires_at,
        )
        .select_from(jobs.outerjoin(workers, workers.c.id == jobs.c.worker_id))
        .where(jobs.c.id.in_(picked), jobs.c.state == RUNNING)
    )


def lost(before: Sequence[Any], claimed: Sequence[Any]) -> list[dict[str, Any]]:
    """The ``lease_expired`` records of the jobs a claim returned (``claimed``) that ran under
    an expired lease before it (``before``, as :func:`expired_before` read them): the attempt
    the lease was for, from its claim to the lease's end."""
    if not before:
        return []
    taken = {row.id for row in claimed}
    return [
        {
            "job_id": old.id,
            "lease_token": old.lease_token,
            "attempt": old.attempt,
            "worker_id": old.worker_id,
            "host": old.host,
            "pid": old.pid,
            "claimed_at": old.started_at,
            "finished_at": old.lease_expires_at,
            "outcome": LEASE_EXPIRED,
            "category": FailureCategory.LEASE_EXPIRED.value,
            "error_class": None,
            "detail": None,
            "retry_at": None,
        }
        for old in before
        if old.id in taken
    ]


def taking_over(claim: Step, before: Step | None, keep: int) -> Plan[list[Any]]:
    """Run ``claim`` (a claim statement and its parameters), reading the expired leases it may
    take over first with ``before`` (``None``: it takes none), and record those it took, keeping
    each job's last ``keep`` claims' records. Its value: the claimed rows."""
    old: list[Any] = [] if before is None else (yield before)
    claimed = yield claim
    yield from record_plan(lost(old, claimed), keep)
    return claimed
