"""Inserting jobs on the SQL stores, written once in portable SQLAlchemy Core: the general
insert every dialect can take (dialects add faster paths of their own), and the same insert as
a plan for a transaction the caller owns (:mod:`caravel.store.inserts.caller`). Jobs with a
pending key are settled by :mod:`caravel.store.inserts.pending`.
"""

from __future__ import annotations

from asyncio import AbstractEventLoop, run_coroutine_threadsafe
from collections.abc import Iterable, Sequence
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from caravel.store.inserts.pending import settle_plan, upsert_keep, upsert_replace
from caravel.store.plans import Plan, Step, outcomes_plan, run_plan
from caravel.store.rows import job_row
from caravel.store.schema import jobs
from caravel.store.transactions import ConnectionT, SqlTransactions
from caravel.store.values import InsertOutcome, InsertResult, NewJob

__all__ = ["SqlInserts"]


class SqlInserts(SqlTransactions[ConnectionT]):
    """``job_insert_many`` and the insert plan of the SQL stores."""

    #: Rows per multi-row INSERT; dialects lower it to respect their parameter limits.
    insert_chunk = 500

    def _insert(self) -> Any:
        """The dialect's INSERT construct (it must offer ``on_conflict_do_nothing`` and
        ``on_conflict_do_update``)."""
        return sa.insert(jobs)

    def _is_pending_conflict(self, exc: BaseException) -> bool:
        """Whether ``exc`` is the pending-key index refusing a row made ready again (only where
        writers race: one writer at a time never meets it)."""
        return False

    async def job_insert_many(
        self, chunks: Iterable[Sequence[NewJob]], *, total: int
    ) -> InsertResult:
        new_jobs = [job for chunk in chunks for job in chunk]
        return InsertResult(new_jobs, await self._insert_general(new_jobs))

    def job_insert_blocking(self, new_job: NewJob, loop: AbstractEventLoop) -> InsertResult:
        # Dialects insert on the caller's thread; the general insert runs on the loop.
        inserting = self.job_insert_many([[new_job]], total=1)
        return run_coroutine_threadsafe(inserting, loop).result()

    async def _insert_general(self, new_jobs: Sequence[NewJob]) -> list[InsertOutcome]:
        """Insert in one transaction, skipping rows that are already there, and look the
        skipped jobs' rows up (the path every dialect can take)."""
        if not new_jobs:
            return []
        # One job is one INSERT statement (any duplicate lookup after it only reads committed
        # rows), so it needs no explicit transaction around it; a job with a pending key may
        # take a few statements.
        single = len(new_jobs) == 1 and new_jobs[0].pending_key is None
        async with self._write("job_insert", single=single) as conn:
            return await run_plan(conn.execute, self._settle_plan(new_jobs))

    def _settle_plan(self, new_jobs: Sequence[NewJob]) -> Plan[list[InsertOutcome]]:
        """Each job inserted, or settled against the row that kept it out (see
        :func:`~caravel.store.inserts.pending.settle_plan`)."""
        keep = self._statement("pending_keep", lambda: upsert_keep(self._insert()))
        replace = self._statement("pending_replace", lambda: upsert_replace(self._insert()))
        return settle_plan(new_jobs, self._plain_plan, keep, replace)

    def _plain_plan(self, new_jobs: Sequence[NewJob]) -> Plan[list[InsertOutcome]]:
        inserted = yield from self._insert_rows_plan(new_jobs)
        return (yield from outcomes_plan(new_jobs, inserted, self.insert_chunk))

    async def _outcomes(
        self, conn: ConnectionT, new_jobs: Sequence[NewJob], inserted: set[UUID]
    ) -> list[InsertOutcome]:
        """Each job's outcome once the batch is inserted (see :func:`outcomes_plan`)."""
        return await run_plan(conn.execute, outcomes_plan(new_jobs, inserted, self.insert_chunk))

    async def _insert_rows(self, conn: ConnectionT, new_jobs: Sequence[NewJob]) -> set[UUID]:
        return await run_plan(conn.execute, self._insert_rows_plan(new_jobs))

    def _insert_plan(self, new_jobs: Sequence[NewJob]) -> Plan[list[InsertOutcome]]:
        """The whole insert of ``new_jobs`` as a plan, for a transaction the caller owns: the
        rows, each job's outcome, and the dialect's wake-up for the queues that got jobs due
        now (delivered when that transaction commits, where the dialect can)."""
        outcomes = yield from self._settle_plan(new_jobs)
        due = {
            job.queue
            for job, outcome in zip(new_jobs, outcomes, strict=True)
            if (outcome.inserted or outcome.replaced) and job.due_at <= job.created_at
        }
        yield from self._announce_plan(due)
        return outcomes

    def _announce_plan(self, queues: set[str]) -> Plan[None]:
        """Statements that wake workers of ``queues`` when the caller's transaction commits
        (PostgreSQL's NOTIFY); by default none."""
        return
        yield  # pragma: no cover

    def _insert_rows_plan(self, new_jobs: Sequence[NewJob]) -> Plan[set[UUID]]:
        """Insert what is new; the ids inserted. No conflict target: a duplicate
        idempotency key and a duplicate id (a relay sending the same outbox intent twice) are
        both settled by the database, and the row is skipped."""
        # One cached statement over many parameter sets: SQLAlchemy batches it into multi-row
        # INSERTs ("insertmanyvalues") without recompiling for each batch size.
        rows = [self._row_values(job) for job in new_jobs]
        return {row.id for row in (yield Step(self._insert_statement(), rows))}

    def _insert_statement(self) -> Any:
        """INSERT of whole job rows (bound by column name) that skips any duplicate and returns
        the ids it inserted; built once."""
        return self._statement(
            "insert", lambda: self._insert().on_conflict_do_nothing().returning(jobs.c.id)
        )

    @staticmethod
    def _row_values(job: NewJob) -> dict[str, Any]:
        return job_row(job)
