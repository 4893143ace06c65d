"""The shared base of the SQL stores: every operation of the store protocol written once, in
portable SQLAlchemy Core.

Dialect modules subclass :class:`SqlStore` and supply only what differs: the INSERT construct with
``ON CONFLICT``, how claim candidates are locked, how a transaction begins, how schema errors are
recognised, and any push wake-ups.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Generic, Protocol, TypeVar
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from caravel.clock import from_ms
from caravel.errors import IdempotencyConflictError, SchemaNotReadyError
from caravel.jobs import ClaimedJob, FailureCategory, JobState, JobStatus, Lease
from caravel.store.errors import ErrorTranslation
from caravel.store.protocol import (
    ClaimBatch,
    ClaimRequest,
    ClaimSource,
    FailedAttempt,
    Heartbeat,
    InsertOutcome,
    InsertResult,
    JobFilter,
    JobRef,
    NewJob,
    QueueCounts,
    ThroughputBucket,
    ThroughputQuery,
    WorkerRecord,
)
from caravel.store.schema import VERSION_TABLE, jobs, workers

__all__ = ["Connection", "SqlStore", "claimed_from_rows"]

_RUNNING = JobState.RUNNING.value
_READY = JobState.READY.value
_DEAD = JobState.DEAD_LETTER.value
_COMPLETED = JobState.COMPLETED.value

_STATUS_COLUMNS = (
    jobs.c.id,
    jobs.c.queue,
    jobs.c.tenant_id,
    jobs.c.job_type,
    jobs.c.state,
    jobs.c.attempt,
    jobs.c.max_attempts,
    jobs.c.due_at,
    jobs.c.created_at,
    jobs.c.updated_at,
    jobs.c.started_at,
    jobs.c.finished_at,
    jobs.c.lease_expires_at,
    jobs.c.last_failure,
)

_CLAIM_RETURNING = (
    jobs.c.id,
    jobs.c.state,
    jobs.c.queue,
    jobs.c.tenant_id,
    jobs.c.job_type,
    jobs.c.payload,
    jobs.c.attempt,
    jobs.c.max_attempts,
    jobs.c.lease_token,
    jobs.c.lease_expires_at,
    jobs.c.started_at,
    jobs.c.due_at,
    jobs.c.trace_context,
)


def _optional_time(ms: int | None) -> Any:
    return None if ms is None else from_ms(ms)


def _status(row: Any) -> JobStatus:
    return JobStatus(
        job_id=row.id,
        queue=row.queue,
        tenant_id=row.tenant_id,
        job_type=row.job_type,
        state=JobState(row.state),
        attempt=row.attempt,
        max_attempts=row.max_attempts,
        due_at=from_ms(row.due_at),
        created_at=from_ms(row.created_at),
        updated_at=from_ms(row.updated_at),
        started_at=_optional_time(row.started_at),
        finished_at=_optional_time(row.finished_at),
        lease_expires_at=_optional_time(row.lease_expires_at),
        last_failure=row.last_failure,
    )


def _count(condition: sa.ColumnElement[bool]) -> sa.ColumnElement[int]:
    return sa.func.coalesce(sa.func.sum(sa.case((condition, 1), else_=0)), 0)


def claimed_from_rows(rows: Sequence[Sequence[Any]]) -> ClaimBatch:
    """The jobs a claim returned (columns in ``_CLAIM_RETURNING`` order), oldest due first;
    rows the claim dead-lettered instead (their last lease had expired) are only counted."""
    claimed: list[ClaimedJob] = []
    dead = 0
    for row in rows:
        (job_id, state, queue, tenant, job_type, payload, attempt, max_attempts, token, expires,
         started, due, trace) = row  # fmt: skip
        if state != _RUNNING:
            dead += 1
            continue
        lease = Lease(
            job_id=job_id,
            token=token,
            expires_at_ms=expires,
            claimed_at_ms=started,
            attempt=attempt,
            max_attempts=max_attempts,
        )
        claimed.append(
            ClaimedJob(
                lease=lease,
                queue=queue,
                tenant_id=tenant,
                job_type=job_type,
                payload=payload,
                due_at_ms=due,
                trace_context=trace,
            )
        )
    claimed.sort(key=lambda job: job.due_at_ms)
    return ClaimBatch(claimed=claimed, dead_lettered=dead)


class Connection(Protocol):
    """What the shared operations need of a connection inside a transaction: to execute a
    statement and return its result (SQLAlchemy's ``AsyncConnection`` is one)."""

    async def execute(self, statement: Any, parameters: Any = None, /) -> sa.Result[Any]: ...


ConnectionT = TypeVar("ConnectionT", bound=Connection)


class SqlStore(Generic[ConnectionT]):
    """Queue operations over connections of the dialect's kind (``ConnectionT``), which its
    :meth:`_transaction` provides."""

    supports_listen_notify = False
    db_system = "sql"
    #: Rows per multi-row INSERT; dialects lower it to respect their parameter limits.
    insert_chunk = 500

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.closed = False

    # ----- dialect hooks -------------------------------------------------------------------

    def _insert(self) -> Any:
        """The dialect's INSERT construct (it must offer ``on_conflict_do_nothing``)."""
        return sa.insert(jobs)

    def _claim_target(self, candidates: sa.Select[Any]) -> sa.ColumnElement[bool]:
        """The rows a claim updates: those ``candidates`` picks (locking them where the
        database needs it)."""
        return jobs.c.id.in_(candidates.scalar_subquery())

    def _is_schema_missing(self, exc: BaseException) -> bool:
        """Whether a driver error means the queue's tables or columns are missing."""
        return False

    def _transaction(
        self, *, readonly: bool, durable: bool = True, single: bool = False
    ) -> AbstractAsyncContextManager[ConnectionT]:
        """A transaction (every dialect provides it). ``durable=False`` lets a dialect skip
        waiting for the commit to reach disk (acknowledgements only: losing one means the job
        runs again). ``single=True`` says the work is one statement (or statements that need
        not be atomic together), so a dialect may run it without an explicit BEGIN and
        COMMIT."""
        raise NotImplementedError

    # ----- plumbing ------------------------------------------------------------------------

    #: The driver's own exceptions, for dialects that run some statements on it directly.
    driver_errors: tuple[type[Exception], ...] = ()

    def _translated(self, operation: str) -> ErrorTranslation:
        return ErrorTranslation(
            operation, driver_errors=self.driver_errors, schema_missing=self._is_schema_missing
        )

    #: The longest any one store operation may take, commit included. Past it the operation's
    #: connection is cut, so a link that silently stopped answering becomes a
    #: :class:`~caravel.errors.StoreError` in bounded time instead of a hang.
    operation_timeout = 45.0

    def _sever(self, conn: ConnectionT) -> None:
        """Cut a connection that is stuck mid-operation (dialects that can, do)."""

    @asynccontextmanager
    async def _deadline(self, **kwargs: bool) -> AsyncIterator[ConnectionT]:
        holder: list[ConnectionT] = []

        def expire() -> None:
            if holder:
                self._sever(holder[0])

        timer = asyncio.get_running_loop().call_later(self.operation_timeout, expire)
        try:
            async with self._transaction(**kwargs) as conn:
                holder.append(conn)
                yield conn
        finally:
            timer.cancel()

    @asynccontextmanager
    async def _write(
        self, operation: str, *, durable: bool = True, single: bool = False
    ) -> AsyncIterator[ConnectionT]:
        async with (
            self._translated(operation),
            self._deadline(readonly=False, durable=durable, single=single) as conn,
        ):
            yield conn

    @asynccontextmanager
    async def _read(self, operation: str) -> AsyncIterator[ConnectionT]:
        async with (
            self._translated(operation),
            self._deadline(readonly=True, single=True) as conn,
        ):
            yield conn

    # ----- enqueue -------------------------------------------------------------------------

    async def job_insert_many(
        self, chunks: Iterable[Sequence[NewJob]], *, total: int
    ) -> InsertResult:
        new_jobs = [job for chunk in chunks for job in chunk]
        return InsertResult(new_jobs, await self._insert_general(new_jobs))

    async def _insert_general(self, new_jobs: Sequence[NewJob]) -> list[InsertOutcome]:
        """Insert in one transaction, skipping rows that are already there, and look the
        skipped jobs' rows up (the path every dialect can take)."""
        if not new_jobs:
            return []
        # One job is one INSERT statement (any duplicate lookup after it only reads committed
        # rows), so it needs no explicit transaction around it.
        async with self._write("job_insert", single=len(new_jobs) == 1) as conn:
            inserted = await self._insert_rows(conn, new_jobs)
            return await self._outcomes(conn, new_jobs, inserted)

    async def _outcomes(
        self, conn: ConnectionT, new_jobs: Sequence[NewJob], inserted: set[UUID]
    ) -> list[InsertOutcome]:
        """Each job's outcome once the batch is inserted: its own row, or the row that kept it
        out. Raises :class:`~caravel.errors.IdempotencyConflictError` (rolling the batch back)
        when that row has other content."""
        duplicates = [job for job in new_jobs if job.id not in inserted]
        by_key, by_id = await self._existing(conn, duplicates)
        outcomes: list[InsertOutcome] = []
        for job in new_jobs:
            if job.id in inserted:
                outcomes.append(InsertOutcome(job.id, inserted=True))
                continue
            key = (job.queue, job.tenant_id, job.idempotency_key)
            row = by_key.get(key) if job.idempotency_key is not None else None
            row = row if row is not None else by_id[job.id]
            same = (row.queue, row.tenant_id, row.job_type, row.payload) == (
                job.queue,
                job.tenant_id,
                job.job_type,
                job.payload,
            )
            if not same:
                raise IdempotencyConflictError(row.id)  # rolls the whole batch back
            outcomes.append(InsertOutcome(row.id, inserted=False))
        return outcomes

    async def _insert_rows(self, conn: ConnectionT, new_jobs: Sequence[NewJob]) -> set[UUID]:
        """Insert what is new; return the ids inserted. No conflict target: a duplicate
        idempotency key and a duplicate id (a relay sending the same outbox intent twice) are
        both settled by the database, and the row is skipped."""
        # One cached statement over many parameter sets: SQLAlchemy batches it into multi-row
        # INSERTs ("insertmanyvalues") without recompiling for each batch size.
        rows = [self._row_values(job) for job in new_jobs]
        stmt = self._insert_statement()
        return set((await conn.execute(stmt, rows)).scalars())

    def _insert_statement(self) -> Any:
        """INSERT of whole job rows (bound by column name) that skips any duplicate and returns
        the ids it inserted; built once."""
        return self._statement(
            "insert", lambda: self._insert().on_conflict_do_nothing().returning(jobs.c.id)
        )

    @staticmethod
    def _row_values(job: NewJob) -> dict[str, Any]:
        return {
            "id": job.id,
            "queue": job.queue,
            "job_type": job.job_type,
            "tenant_id": job.tenant_id,
            "idempotency_key": job.idempotency_key,
            "payload": job.payload,
            "state": _READY,
            "attempt": 0,
            "max_attempts": job.max_attempts,
            "due_at": job.due_at,
            "available_at": job.due_at,
            "lease_token": 0,
            "created_at": job.created_at,
            "updated_at": job.created_at,
            "trace_context": job.trace_context,
        }

    async def _existing(
        self, conn: ConnectionT, duplicates: Sequence[NewJob]
    ) -> tuple[dict[tuple[str, str, str | None], Any], dict[UUID, Any]]:
        """The rows that kept ``duplicates`` from being inserted: by idempotency key where the
        job has one, and by id (for a job inserted before under the same id)."""
        columns = (
            jobs.c.id,
            jobs.c.queue,
            jobs.c.tenant_id,
            jobs.c.idempotency_key,
            jobs.c.job_type,
            jobs.c.payload,
        )
        keys = sorted(
            {(j.queue, j.tenant_id, j.idempotency_key) for j in duplicates if j.idempotency_key},
            key=lambda k: (k[0], k[1], k[2] or ""),
        )
        ids = sorted({j.id for j in duplicates})
        by_key: dict[tuple[str, str, str | None], Any] = {}
        by_id: dict[UUID, Any] = {}
        step = self.insert_chunk
        for start in range(0, len(keys), step):
            condition = sa.tuple_(jobs.c.queue, jobs.c.tenant_id, jobs.c.idempotency_key).in_(
                keys[start : start + step]
            )
            for row in await conn.execute(sa.select(*columns).where(condition)):
                by_key[(row.queue, row.tenant_id, row.idempotency_key)] = row
        for start in range(0, len(ids), step):
            condition = jobs.c.id.in_(ids[start : start + step])
            for row in await conn.execute(sa.select(*columns).where(condition)):
                by_id[row.id] = row
        return by_key, by_id

    # ----- claim and acknowledge -----------------------------------------------------------

    def _claim_statement(self, source: ClaimSource, *, literal_limit: bool = True) -> sa.Update:
        """The claim for one source of jobs (see :data:`~caravel.store.api.ClaimSource`).
        ``literal_limit`` writes the batch size into the SQL text instead of binding it."""
        now = sa.bindparam("b_now", type_=sa.BigInteger())
        expires = sa.bindparam("b_expires", type_=sa.BigInteger())
        candidates = sa.select(jobs.c.id).where(
            jobs.c.queue == sa.bindparam("b_queue"), jobs.c.available_at <= now
        )
        # The state as literal SQL, so the planner can match the partial lease index.
        if source == "ready":
            candidates = candidates.where(jobs.c.state == sa.literal_column(f"'{_READY}'"))
        elif source == "expired":
            candidates = candidates.where(jobs.c.state == sa.literal_column(f"'{_RUNNING}'"))
        candidates = candidates.order_by(jobs.c.available_at).limit(
            sa.bindparam("b_limit", type_=sa.Integer(), literal_execute=literal_limit)
        )
        exhausted = sa.and_(jobs.c.state == _RUNNING, jobs.c.attempt >= jobs.c.max_attempts)

        def pick(if_exhausted: Any, otherwise: Any) -> sa.Case[Any]:
            return sa.case((exhausted, if_exhausted), else_=otherwise)

        return (
            sa.update(jobs)
            .where(self._claim_target(candidates))
            .values(
                state=pick(_DEAD, _RUNNING),
                attempt=pick(jobs.c.attempt, jobs.c.attempt + 1),
                lease_token=jobs.c.lease_token + 1,
                lease_expires_at=pick(sa.null(), expires),
                available_at=pick(sa.null(), expires),
                started_at=pick(jobs.c.started_at, now),
                finished_at=pick(now, sa.null()),
                last_failure=pick(FailureCategory.LEASE_EXPIRED.value, jobs.c.last_failure),
                updated_at=now,
            )
            .returning(*_CLAIM_RETURNING)
        )

    @staticmethod
    def _claim_params(request: ClaimRequest, now: int) -> dict[str, Any]:
        return {
            "b_queue": request.queue,
            "b_limit": request.limit,
            "b_now": now,
            "b_expires": now + request.lease_ms,
        }

    async def job_claim_many(self, request: ClaimRequest) -> ClaimBatch:
        source = request.source
        stmt = self._statement(f"claim_{source}", lambda: self._claim_statement(source))
        async with self._write("job_claim", single=True) as conn:
            rows = (await conn.execute(stmt, self._claim_params(request, request.now))).all()
        return claimed_from_rows(rows)

    def _held_clause(self) -> sa.ColumnElement[bool]:
        """Rows still held by the leases bound as ``b_ids``/``b_pairs``: same id, same token,
        still running. The ``id IN`` part lets the database answer from the primary key."""
        pairs = sa.bindparam(
            "b_pairs", expanding=True, type_=sa.TupleType(sa.Uuid(), sa.BigInteger())
        )
        return sa.and_(
            jobs.c.id.in_(sa.bindparam("b_ids", expanding=True, type_=sa.Uuid())),
            sa.tuple_(jobs.c.id, jobs.c.lease_token).in_(pairs),
            jobs.c.state == _RUNNING,
        )

    def _held_params(self, leases: Sequence[Lease]) -> dict[str, Any]:
        return {
            "b_ids": [lease.job_id for lease in leases],
            "b_pairs": [(lease.job_id, lease.token) for lease in leases],
        }

    def _statement(self, name: str, build: Callable[[], Any]) -> Any:
        """Statements built once per store and reused with new parameters."""
        cache: dict[str, Any] = self.__dict__.setdefault("_statements", {})
        found = cache.get(name)
        if found is None:
            found = cache[name] = build()
        return found

    def _complete_statement(self) -> sa.Update:
        return (
            sa.update(jobs)
            .where(self._held_clause())
            .values(
                state=_COMPLETED,
                available_at=None,
                lease_expires_at=None,
                finished_at=sa.bindparam("b_now"),
                updated_at=sa.bindparam("b_now"),
            )
            .returning(jobs.c.id)
        )

    async def job_complete_many(self, leases: Sequence[Lease], now: int) -> set[UUID]:
        if not leases:
            return set()
        stmt = self._statement("complete", self._complete_statement)
        params = {**self._held_params(leases), "b_now": now}
        async with self._write("job_complete", durable=False) as conn:
            return set((await conn.execute(stmt, params)).scalars())

    async def job_fail_many(self, failures: Sequence[FailedAttempt], now: int) -> set[UUID]:
        if not failures:
            return set()
        done: set[UUID] = set()
        async with self._write("job_fail", durable=False) as conn:
            for failure in failures:
                retry_at = failure.retry_at
                stmt = (
                    sa.update(jobs)
                    .where(self._held_clause())
                    .values(
                        state=_READY if retry_at is not None else _DEAD,
                        due_at=retry_at if retry_at is not None else jobs.c.due_at,
                        available_at=retry_at,
                        lease_expires_at=None,
                        finished_at=None if retry_at is not None else now,
                        last_failure=failure.category,
                        updated_at=now,
                    )
                    .returning(jobs.c.id)
                )
                held = self._held_params([failure.lease])
                done.update((await conn.execute(stmt, held)).scalars())
        return done

    async def job_renew_lease(self, lease: Lease, now: int, expires_at: int) -> Lease | None:
        stmt = (
            sa.update(jobs)
            .where(self._held_clause(), jobs.c.lease_expires_at > now)
            .values(lease_expires_at=expires_at, available_at=expires_at, updated_at=now)
            .returning(jobs.c.lease_expires_at)
        )
        async with self._write("job_renew_lease", single=True) as conn:
            renewed = (await conn.execute(stmt, self._held_params([lease]))).scalar_one_or_none()
        if renewed is None:
            return None
        return Lease(
            job_id=lease.job_id,
            token=lease.token,
            expires_at_ms=renewed,
            claimed_at_ms=lease.claimed_at_ms,
            attempt=lease.attempt,
            max_attempts=lease.max_attempts,
        )

    # ----- status and replay ---------------------------------------------------------------

    @staticmethod
    def _owned(ref: JobRef) -> sa.ColumnElement[bool]:
        return sa.and_(
            jobs.c.id == ref.job_id, jobs.c.queue == ref.queue, jobs.c.tenant_id == ref.tenant_id
        )

    async def job_get(self, ref: JobRef) -> JobStatus | None:
        stmt = sa.select(*_STATUS_COLUMNS).where(self._owned(ref))
        async with self._read("job_get") as conn:
            row = (await conn.execute(stmt)).one_or_none()
        return None if row is None else _status(row)

    async def job_get_payload(self, ref: JobRef) -> str | None:
        stmt = sa.select(jobs.c.payload).where(self._owned(ref))
        async with self._read("job_get_payload") as conn:
            payload: str | None = (await conn.execute(stmt)).scalar_one_or_none()
        return payload

    async def job_replay(self, ref: JobRef, now: int) -> bool:
        stmt = (
            sa.update(jobs)
            .where(self._owned(ref), jobs.c.state == _DEAD)
            .values(
                state=_READY,
                attempt=0,
                due_at=now,
                available_at=now,
                lease_expires_at=None,
                started_at=None,
                finished_at=None,
                last_failure=None,
                updated_at=now,
            )
            .returning(jobs.c.id)
        )
        async with self._write("job_replay", single=True) as conn:
            return (await conn.execute(stmt)).scalar_one_or_none() is not None

    async def job_list(self, where: JobFilter) -> list[JobStatus]:
        conditions: list[sa.ColumnElement[bool]] = []
        if where.queue is not None:
            conditions.append(jobs.c.queue == where.queue)
        if where.tenant_id is not None:
            conditions.append(jobs.c.tenant_id == where.tenant_id)
        if where.state is not None:
            conditions.append(jobs.c.state == where.state.value)
        if where.job_type is not None:
            conditions.append(jobs.c.job_type == where.job_type)
        order = (
            (jobs.c.created_at.asc(), jobs.c.id.asc())
            if where.oldest_first
            else (jobs.c.created_at.desc(), jobs.c.id.desc())
        )
        stmt = (
            sa.select(*_STATUS_COLUMNS)
            .where(*conditions)
            .order_by(*order)
            .limit(where.limit)
            .offset(where.offset)
        )
        async with self._read("job_list") as conn:
            return [_status(row) for row in await conn.execute(stmt)]

    async def queue_counts(self, queue: str | None, now: int) -> list[QueueCounts]:
        ready = jobs.c.state == _READY
        running = jobs.c.state == _RUNNING
        stmt = (
            sa.select(
                jobs.c.queue,
                _count(sa.and_(ready, jobs.c.due_at <= now)).label("ready"),
                _count(sa.and_(ready, jobs.c.due_at > now)).label("delayed"),
                _count(sa.and_(running, jobs.c.lease_expires_at > now)).label("running"),
                _count(sa.and_(running, jobs.c.lease_expires_at <= now)).label("expired"),
                _count(jobs.c.state == _DEAD).label("dead_letter"),
                _count(jobs.c.state == _COMPLETED).label("completed"),
                sa.func.min(sa.case((sa.and_(ready, jobs.c.due_at <= now), jobs.c.due_at))).label(
                    "oldest"
                ),
            )
            .group_by(jobs.c.queue)
            .order_by(jobs.c.queue)
        )
        if queue is not None:
            stmt = stmt.where(jobs.c.queue == queue)
        async with self._read("queue_counts") as conn:
            rows = (await conn.execute(stmt)).all()
        return [
            QueueCounts(
                queue=row.queue,
                ready=int(row.ready),
                delayed=int(row.delayed),
                running=int(row.running),
                expired=int(row.expired),
                dead_letter=int(row.dead_letter),
                completed=int(row.completed),
                oldest_ready_due_ms=None if row.oldest is None else int(row.oldest),
            )
            for row in rows
        ]

    async def job_throughput(self, query: ThroughputQuery) -> list[ThroughputBucket]:
        queue, since, until, bucket_ms = query.queue, query.since, query.until, query.bucket_ms
        finished = jobs.c.finished_at
        conditions = [
            finished >= since,
            finished < until,
            jobs.c.state.in_((_COMPLETED, _DEAD)),
        ]
        if queue is not None:
            conditions.append(jobs.c.queue == queue)
        # Integer division on both databases (finished_at - since is never negative here).
        inner = (
            sa.select(jobs.c.queue, jobs.c.state, ((finished - since) // bucket_ms).label("bucket"))
            .where(*conditions)
            .subquery()
        )
        stmt = (
            sa.select(
                inner.c.queue,
                inner.c.bucket,
                _count(inner.c.state == _COMPLETED).label("completed"),
                _count(inner.c.state == _DEAD).label("dead_lettered"),
            )
            .group_by(inner.c.queue, inner.c.bucket)
            .order_by(inner.c.queue, inner.c.bucket)
        )
        async with self._read("job_throughput") as conn:
            rows = (await conn.execute(stmt)).all()
        return [
            ThroughputBucket(
                queue=row.queue,
                start=since + int(row.bucket) * bucket_ms,
                completed=int(row.completed),
                dead_lettered=int(row.dead_lettered),
            )
            for row in rows
        ]

    # ----- worker registry ------------------------------------------------------------------

    async def worker_register(self, worker: WorkerRecord) -> None:
        values = {
            "id": worker.id,
            "host": worker.host,
            "pid": worker.pid,
            "queues": ",".join(worker.queues),
            "concurrency": worker.concurrency,
            "started_at": worker.started_at,
            "heartbeat_at": worker.heartbeat_at,
            "in_flight": worker.in_flight,
            "stopped_at": None,
        }
        async with self._write("worker_register", durable=False) as conn:
            await conn.execute(sa.insert(workers).values(values))

    async def worker_heartbeat(self, beat: Heartbeat) -> None:
        values: dict[str, Any] = {"heartbeat_at": beat.now, "in_flight": beat.in_flight}
        if beat.stopped:
            values["stopped_at"] = beat.now
        stmt = sa.update(workers).where(workers.c.id == beat.worker_id).values(values)
        async with self._write("worker_heartbeat", durable=False) as conn:
            await conn.execute(stmt)

    async def worker_list(self, since: int) -> list[WorkerRecord]:
        stmt = (
            sa.select(workers)
            .where(workers.c.heartbeat_at >= since)
            .order_by(workers.c.started_at.desc())
            .limit(500)
        )
        async with self._read("worker_list") as conn:
            rows = (await conn.execute(stmt)).all()
        return [
            WorkerRecord(
                id=row.id,
                host=row.host,
                pid=row.pid,
                queues=tuple(q for q in row.queues.split(",") if q),
                concurrency=row.concurrency,
                started_at=row.started_at,
                heartbeat_at=row.heartbeat_at,
                in_flight=row.in_flight,
                stopped_at=row.stopped_at,
            )
            for row in rows
        ]

    async def schema_revision(self) -> str | None:
        version = sa.table(VERSION_TABLE, sa.column("version_num", sa.String()))
        try:
            async with self._read("schema_revision") as conn:
                revision: str | None = (
                    await conn.execute(sa.select(version.c.version_num))
                ).scalar_one_or_none()
        except SchemaNotReadyError:
            return None
        return revision

    def wakeups(self, queues: Sequence[str]) -> AsyncIterator[str] | None:
        return None

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        await self.engine.dispose()
