"""What an attempt's end stores besides its state, for every SQL dialect: a completion's result,
a snooze, and reading a result back. (The completion and failure statements themselves are
:mod:`caravel.store.queries`'.)"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from caravel.jobs import JobState, Lease
from caravel.store.protocol import JobRef
from caravel.store.queries import complete, owned
from caravel.store.schema import jobs

__all__ = ["complete_with_result", "result", "snooze", "split_results"]

READY = JobState.READY.value


def split_results(
    leases: Sequence[Lease], results: Mapping[UUID, str] | None
) -> tuple[list[Lease], list[tuple[Lease, str]]]:
    """The leases whose completion stores no result, and those that store one with it."""
    if not results:
        return list(leases), []
    plain: list[Lease] = []
    valued: list[tuple[Lease, str]] = []
    for lease in leases:
        text = results.get(lease.job_id)
        if text is None:
            plain.append(lease)
        else:
            valued.append((lease, text))
    return plain, valued


def complete_with_result(held: sa.ColumnElement[bool]) -> sa.Update:
    """The completion of the lease ``held`` matches that stores its result, bound as
    ``b_result``."""
    return complete(held, sa.bindparam("b_result", type_=sa.Text()))


def snooze(held: sa.ColumnElement[bool], key: Any = jobs.c.pending_key) -> sa.Update:
    """The row ``held`` matches made ready again at ``b_until``, its attempt given back, its
    snoozes counted and its pending key ``key``; returns its id. Not a failure:
    ``last_failure`` stays as it was."""
    until = sa.bindparam("b_until", type_=sa.BigInteger())
    return (
        sa.update(jobs)
        .where(held)
        .values(
            state=READY,
            attempt=jobs.c.attempt - 1,
            snoozes=jobs.c.snoozes + 1,
            due_at=until,
            available_at=until,
            lease_expires_at=None,
            updated_at=sa.bindparam("b_now", type_=sa.BigInteger()),
            pending_key=key,
        )
        .returning(jobs.c.id)
    )


def result(ref: JobRef) -> sa.Select[Any]:
    return sa.select(jobs.c.result).where(owned(ref))
