"""The read operations of a SQL store (:class:`~caravel.store.protocol.ReadStore`, which
:class:`~caravel.store.base.SqlStore` has): a job's status, result, payload and attempts, the
listings, the queue counts and throughput, and the schema's revision. Each runs in a read
transaction; dialects change only how finished jobs are estimated and what the counts' read runs
first."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import sqlalchemy as sa

from caravel.attempts import AttemptRecord
from caravel.errors import SchemaNotReadyError
from caravel.jobs import JobState, JobStatus
from caravel.store import outcomes, queries
from caravel.store.last_attempts import listed_from_row, listing_with_last_attempt
from caravel.store.protocol import (
    JobFilter,
    JobRef,
    QueueCounts,
    ThroughputBucket,
    ThroughputQuery,
)
from caravel.store.rows import (
    attempts_from_rows,
    counts_from_row,
    status_from_row,
    throughput_from_row,
)
from caravel.store.transactions import ConnectionT, SqlTransactions

__all__ = ["SqlReads"]

DEAD = JobState.DEAD_LETTER.value
COMPLETED = JobState.COMPLETED.value
CANCELLED = JobState.CANCELLED.value


class SqlReads(SqlTransactions[ConnectionT]):
    """The reads of a SQL store, over its read transactions."""

    #: A statement the counts' read transaction runs first, where the dialect needs one.
    _counts_preamble: str | None = None
    #: The table of exact finished counts per queue and state, where the dialect keeps one
    #: (see :func:`~caravel.store.queries.counts`).
    _kept_counts: sa.TableClause | None = None

    async def job_get(self, ref: JobRef) -> JobStatus | None:
        async with self._read("job_get") as conn:
            row = (await conn.execute(queries.status(ref))).one_or_none()
        return None if row is None else status_from_row(row, row.result)

    async def job_get_result(self, ref: JobRef) -> str | None:
        async with self._read("job_get_result") as conn:
            found: str | None = (await conn.execute(outcomes.result(ref))).scalar_one_or_none()
        return found

    async def job_get_payload(self, ref: JobRef) -> str | None:
        async with self._read("job_get_payload") as conn:
            payload: str | None = (await conn.execute(queries.payload(ref))).scalar_one_or_none()
        return payload

    async def job_attempts(self, ref: JobRef) -> list[AttemptRecord] | None:
        async with self._read("job_attempts") as conn:
            rows = (await conn.execute(queries.attempt_history(ref))).all()
        return attempts_from_rows(rows)

    async def job_list(self, where: JobFilter) -> list[JobStatus]:
        async with self._read("job_list") as conn:
            stmt = queries.job_list(where, await self._listed_queues(conn, where))
            return [status_from_row(row) for row in await conn.execute(stmt)]

    async def job_list_with_last_attempt(
        self, where: JobFilter
    ) -> list[tuple[JobStatus, AttemptRecord | None]]:
        async with self._read("job_list_with_last_attempt") as conn:
            stmt = listing_with_last_attempt(where, await self._listed_queues(conn, where))
            return [listed_from_row(row) for row in await conn.execute(stmt)]

    async def _listed_queues(self, conn: ConnectionT, where: JobFilter) -> list[str] | None:
        """The queue names a listing merges its page from, read in its own transaction (so
        the page and the names agree); ``None`` when it reads no per-queue pages."""
        if not queries.listed_by_queue(where):
            return None
        names = await conn.execute(queries.listed_queue_names())
        return [name for (name,) in names.all()]

    async def queue_counts(self, queue: str | None, now: int) -> list[QueueCounts]:
        one = queue is not None
        stmt = self._statement(f"counts_{one}", lambda: queries.counts(one, self._kept_counts))
        params: dict[str, Any] = (
            {"b_now": now} if queue is None else {"b_now": now, "b_queue": queue}
        )
        preamble = self._counts_preamble
        async with self._read("queue_counts", single=preamble is None) as conn:
            if preamble is not None:
                await conn.execute(sa.text(preamble))
            rows = (await conn.execute(stmt, params)).all()
            counted = []
            for row in rows:
                counts = counts_from_row(row)
                if row.dead_letter is None:  # more than the exact limit
                    estimate = await self._finished_over_limit(conn, row.queue, DEAD)
                    counts = replace(counts, dead_letter=estimate)
                if row.completed is None:
                    estimate = await self._finished_over_limit(conn, row.queue, COMPLETED)
                    counts = replace(counts, completed=estimate)
                if row.cancelled is None:
                    estimate = await self._finished_over_limit(conn, row.queue, CANCELLED)
                    counts = replace(counts, cancelled=estimate)
                counted.append(counts)
        return counted

    async def _finished_over_limit(self, conn: ConnectionT, queue: str, state: str) -> int:
        found = await self._finished_estimate(conn, queue, state)
        if found <= queries.FINISHED_EXACT_LIMIT:
            # Statistics that say fewer than the rows just seen are stale (the table filled up
            # since it was last analysed): count instead, until they catch up.
            exact = await conn.execute(queries.finished_count(queue, state))
            found = int(exact.scalar_one())
        return found

    async def _finished_estimate(self, conn: ConnectionT, queue: str, state: str) -> int:
        """How many finished jobs ``queue`` holds in ``state``, known to be more than
        :data:`~caravel.store.queries.FINISHED_EXACT_LIMIT`. Dialects with planner statistics
        estimate; this default counts exactly, from the partial index over finished rows."""
        found = await conn.execute(queries.finished_count(queue, state))
        return int(found.scalar_one())

    async def job_throughput(self, query: ThroughputQuery) -> list[ThroughputBucket]:
        async with self._read("job_throughput") as conn:
            if query.queue is not None:
                queues = [query.queue]
            else:
                names = await conn.execute(queries.finished_queue_names())
                queues = [name for (name,) in names.all()]
            if not queues:
                return []
            rows = (await conn.execute(queries.throughput(query, queues))).all()
        return [throughput_from_row(row, query.since, query.bucket_ms) for row in rows]

    async def schema_revision(self) -> str | None:
        try:
            async with self._read("schema_revision") as conn:
                revision: str | None = (
                    await conn.execute(queries.schema_revision())
                ).scalar_one_or_none()
        except SchemaNotReadyError:
            return None
        return revision
