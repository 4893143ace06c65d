"""Counter results: written once per queue job by the handler, read per owner by the API.

The row's primary key is the queue job id, so it doubles as the processing receipt. A job that
runs again (its worker saved the row, then died before acknowledging) finds the row and succeeds
without counting twice; a row that disagrees with the job (another owner or quantity) fails it.
The uniqueness constraint also settles two attempts racing to insert.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

import sqlalchemy as sa
from caravel_samples.backend.db import counter_results, reading
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine


class ResultConflictError(Exception):
    """A result row for this job exists with a different owner or quantity."""


@dataclass(frozen=True, slots=True)
class Result:
    job_id: UUID
    quantity: int
    recorded_at_ms: int


async def _existing(conn: AsyncConnection, job_id: UUID) -> tuple[str, int] | None:
    row = (
        await conn.execute(
            sa.select(counter_results.c.owner_id, counter_results.c.quantity).where(
                counter_results.c.job_id == job_id
            )
        )
    ).one_or_none()
    return None if row is None else (str(row.owner_id), int(row.quantity))


async def record(
    conn: AsyncConnection, job_id: UUID, owner_id: str, quantity: int, recorded_at_ms: int
) -> bool:
    """Save the result of one job once, in its own transaction on ``conn``.

    Returns true when this call saved it and false when a matching row was already there.
    Raises :class:`ResultConflictError` when the saved row disagrees.
    """
    try:
        async with conn.begin():
            existing = await _existing(conn, job_id)
            if existing is None:
                await conn.execute(
                    counter_results.insert().values(
                        job_id=job_id,
                        owner_id=owner_id,
                        quantity=quantity,
                        recorded_at=recorded_at_ms,
                    )
                )
                return True
    except IntegrityError:  # another attempt inserted it between our read and our write
        async with conn.begin():
            existing = await _existing(conn, job_id)
    if existing != (owner_id, quantity):
        raise ResultConflictError
    return False


async def list_for_owner(
    engine: AsyncEngine, owner_id: str, start_ms: int, end_ms: int, *, offset: int, limit: int
) -> list[Result]:
    """The owner's results recorded in ``[start_ms, end_ms)``, by recording time then job id."""
    async with reading(engine) as conn:
        rows = (
            await conn.execute(
                sa.select(
                    counter_results.c.job_id,
                    counter_results.c.quantity,
                    counter_results.c.recorded_at,
                )
                .where(
                    counter_results.c.owner_id == owner_id,
                    counter_results.c.recorded_at >= start_ms,
                    counter_results.c.recorded_at < end_ms,
                )
                .order_by(counter_results.c.recorded_at, counter_results.c.job_id)
                .offset(offset)
                .limit(limit)
            )
        ).all()
    return [Result(row.job_id, int(row.quantity), int(row.recorded_at)) for row in rows]


async def summary_for_owner(
    engine: AsyncEngine, owner_id: str, start_ms: int, end_ms: int
) -> tuple[int, int]:
    """(event count, total quantity) of the owner's results in ``[start_ms, end_ms)``, computed
    by the database."""
    async with reading(engine) as conn:
        row = (
            await conn.execute(
                sa.select(
                    sa.func.count(counter_results.c.job_id),
                    sa.func.coalesce(sa.func.sum(counter_results.c.quantity), 0),
                ).where(
                    counter_results.c.owner_id == owner_id,
                    counter_results.c.recorded_at >= start_ms,
                    counter_results.c.recorded_at < end_ms,
                )
            )
        ).one()
    return int(row[0]), int(row[1])
