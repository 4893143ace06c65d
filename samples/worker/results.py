"""The results database: one row per job, keyed by the queue job id.

That row is both the report's data and the processing receipt. A job that runs again (its worker
died after saving the row but before acknowledging the job) finds its row and acknowledges
without adding the quantity twice; a row that disagrees with the job fails it.
"""

from __future__ import annotations

import time
from uuid import UUID

import sqlalchemy as sa
from caravel_samples.worker.settings import Settings
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine

metadata = sa.MetaData()

results = sa.Table(
    "results",
    metadata,
    sa.Column("job_id", sa.Uuid(), primary_key=True),
    sa.Column("tenant_id", sa.String(128), nullable=False),
    sa.Column("quantity", sa.Integer(), nullable=False),
    sa.Column("recorded_at", sa.BigInteger(), nullable=False),
    # On MariaDB: utf8mb4 text under a binary collation, as the queue's tables (the migration
    # creates it so).
    mariadb_charset="utf8mb4",
    mariadb_collate="utf8mb4_nopad_bin",
)


class ResultConflictError(Exception):
    """A result row for this job exists with a different tenant or quantity."""


def create_engine(settings: Settings) -> AsyncEngine:
    # The queue never creates databases, and neither does the sample: mode=rw fails on a missing
    # file instead of silently starting an empty one.
    url = settings.results_url()
    if settings.provider == "sqlite":
        return create_async_engine(url, connect_args={"timeout": 30})
    if settings.provider == "mariadb":
        # READ COMMITTED, PostgreSQL's default, so that the sample reads alike on both; the
        # server closes connections idle past its wait_timeout.
        return create_async_engine(url, isolation_level="READ COMMITTED", pool_recycle=3600)
    return create_async_engine(url)


async def record(session: AsyncSession, job_id: UUID, tenant_id: str, quantity: int) -> bool:
    """Save the result of one job once. Returns true when this call saved it, false when a
    matching row was already there; raises :class:`ResultConflictError` on a mismatch."""
    existing = await _existing(session, job_id)
    if existing is None:
        try:
            await session.execute(
                results.insert().values(
                    job_id=job_id,
                    tenant_id=tenant_id,
                    quantity=quantity,
                    recorded_at=time.time_ns() // 1_000_000,
                )
            )
            await session.commit()
            return True
        except IntegrityError:  # another worker saved it first
            await session.rollback()
            existing = await _existing(session, job_id)
    if existing != (tenant_id, quantity):
        raise ResultConflictError
    return False


async def _existing(session: AsyncSession, job_id: UUID) -> tuple[str, int] | None:
    row = (
        await session.execute(
            sa.select(results.c.tenant_id, results.c.quantity).where(results.c.job_id == job_id)
        )
    ).one_or_none()
    return None if row is None else (row.tenant_id, row.quantity)


async def report(engine: AsyncEngine) -> dict[str, int]:
    """Event count and total quantity, computed in the database."""
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                sa.select(
                    sa.func.count(results.c.job_id),
                    sa.func.coalesce(sa.func.sum(results.c.quantity), 0),
                )
            )
        ).one()
    return {"events": int(row[0]), "total": int(row[1])}
