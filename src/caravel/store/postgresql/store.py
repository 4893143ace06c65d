"""The PostgreSQL store: claims lock their rows with ``FOR UPDATE SKIP LOCKED`` so competing
workers never wait on each other, acknowledgement batches match their leases through unnested
arrays, and enqueues wake listening workers through NOTIFY."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any
from uuid import UUID

import psycopg
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection

from caravel.attempts import AttemptOutcome
from caravel.errors import StoreError
from caravel.jobs import Lease
from caravel.store import queries
from caravel.store.attempts import trimming
from caravel.store.base import NOBODY, claimed_from_rows
from caravel.store.inserts.pending import PENDING_INDEX
from caravel.store.outcomes import split_results
from caravel.store.plans import Plan, Step
from caravel.store.postgresql.attempts import claim_taking_over, recording
from caravel.store.postgresql.cancels import CANCEL_NOTIFY, listen_cancels, notice_payloads
from caravel.store.postgresql.claim_writes import claim_logging_starts, claim_moving_cursor
from caravel.store.postgresql.driver_plans import (
    DriverStatement,
    compile_statement,
    run_plan_on_driver,
)
from caravel.store.postgresql.inserts import InsertingStore
from caravel.store.postgresql.key_jobs import lateral_key_jobs
from caravel.store.postgresql.limit_hold import (
    LIMIT_HOLD_TIMEOUT,
    XACT_STATUS,
    ClaimProgress,
    bounded_lock,
    log_rolled_back,
    tapped,
)
from caravel.store.postgresql.notifications import NOTIFY, QUEUE_CHANGED, QUEUES_CHANNEL, listen
from caravel.store.postgresql.outages import is_outage
from caravel.store.postgresql.statements import execute
from caravel.store.protocol import ClaimBatch, ClaimRequest, Recorder
from caravel.store.schema import jobs
from caravel.store.schema import queue_limits as queue_limits_table
from caravel.store.schema import queues as queues_table
from caravel.store.schema import schedules as schedules_table

__all__ = ["PostgresStore"]

_SCHEMA_MISSING = {"42P01", "42703"}  # undefined_table, undefined_column

#: The plan (not the rows) of counting one queue's jobs in one finished state. (A finished
#: state implies ``available_at IS NULL``; saying so would make the planner multiply in that
#: column's NULL fraction as if it were independent of the state, and underestimate.)
_ESTIMATE = sa.text(
    "EXPLAIN (FORMAT JSON) SELECT 1 FROM caravel_jobs"
    " WHERE queue = CAST(:queue AS varchar) AND state = CAST(:state AS varchar)"
)


_IDENTITY = sa.text(
    "SELECT (SELECT system_identifier FROM pg_control_system())::text"
    " || '/' || current_database() AS identity"
).columns(identity=sa.String)


#: Relaxes the durability of the commit of the one statement it is part of (see
#: :meth:`PostgresStore._complete_statement`).
_RELAXED = sa.select(sa.func.set_config("synchronous_commit", "off", True))


def _held_rows(*, with_results: bool) -> Any:
    """The leases of a batch as rows ``held(id, token, nonce[, result])``, unnested from
    arrays."""
    ids = sa.bindparam("b_ids", type_=ARRAY(sa.Uuid()))
    tokens = sa.bindparam("b_tokens", type_=ARRAY(sa.BigInteger()))
    nonces = sa.bindparam("b_nonces", type_=ARRAY(sa.BigInteger()))
    if not with_results:
        unnested = sa.func.unnest(ids, tokens, nonces)
        return unnested.table_valued("id", "token", "nonce").render_derived("held")
    texts = sa.bindparam("b_results", type_=ARRAY(sa.Text()))
    unnested = sa.func.unnest(ids, tokens, nonces, texts)
    return unnested.table_valued("id", "token", "nonce", "result").render_derived("held")


def _held_by(held: Any) -> sa.ColumnElement[bool]:
    """The running rows the unnested leases ``held`` still hold."""
    return sa.and_(
        jobs.c.id == held.c.id,
        jobs.c.lease_token == held.c.token,
        jobs.c.lease_nonce == held.c.nonce,
        jobs.c.state == "running",
    )


#: One pruner at a time across every process: the batch's transaction holds this advisory lock
#: (released at its end), and a batch that cannot take it at once does nothing. The key is the
#: bytes "caravelP" read as a big-endian integer.
_PRUNE_LOCK = sa.text("SELECT pg_try_advisory_xact_lock(7161130645419551824)")


class PostgresStore(InsertingStore):
    supports_listen_notify = True
    db_system = "postgresql"
    insert_chunk = 1000
    # The counts' plan is priced for every subquery it might run (most never do), which can
    # pass the server's JIT threshold: compiling it then took 2 s for a 10 ms statement.
    _counts_preamble = "SET LOCAL jit = off"

    def _insert(self) -> Any:
        return postgresql.insert(jobs)

    def _queues_insert(self) -> Any:
        return postgresql.insert(queues_table)

    def _schedules_insert(self) -> Any:
        return postgresql.insert(schedules_table)

    def _queue_limits_insert(self) -> Any:
        return postgresql.insert(queue_limits_table)

    # A fair claim reads each key's first jobs with LATERAL: one bounded index scan per key.
    _fair_key_jobs = staticmethod(lateral_key_jobs)
    _claim_logging_starts = staticmethod(claim_logging_starts)
    _claim_moving_cursor = staticmethod(claim_moving_cursor)

    #: Seconds a limited claim's transaction may wait for its next statement (holding the
    #: queue's limits row) before the server ends it (:mod:`~.limit_hold`).
    limit_hold_timeout = LIMIT_HOLD_TIMEOUT

    def _limit_lock(self, read: sa.Select[Any]) -> sa.Select[Any]:
        # The queue's limited claims take turns on its limits row: each counts the running
        # jobs only once the claim before it committed. A claimer that stalls holding it is
        # cut off after limit_hold_timeout (read when the statement is first built).
        return bounded_lock(read, self.limit_hold_timeout)

    def _queue_changed(self) -> Sequence[Any]:
        return (QUEUE_CHANGED,)

    # Every outcome's statement writes its attempt records, in a data-modifying WITH.
    _records_in_statement = True

    def _recording(
        self, update: sa.Update, *, given_back: bool = False, trimming: bool = False
    ) -> Any:
        return recording(update, given_back=given_back, trimming=trimming)

    def _claim_lock(self, picked: sa.Select[Any]) -> sa.Select[Any]:
        # Lock the picked rows, skipping any another worker holds.
        return picked.with_for_update(skip_locked=True)

    def _claim_target(self, candidates: sa.Select[Any]) -> sa.ColumnElement[bool]:
        # Hand the picked ids over as one array: "id = ANY(array)" is answered from the primary
        # key, whatever the table's size, where a join against the picked set may be planned as
        # a scan of the table.
        picked = candidates.subquery("picked")
        ids = sa.select(sa.func.array_agg(picked.c.id)).scalar_subquery()
        return jobs.c.id == sa.any_(sa.cast(ids, ARRAY(sa.Uuid())))

    _prune_locks_rows = True

    async def _prune_lock(self, conn: AsyncConnection) -> bool:
        return bool((await conn.execute(_PRUNE_LOCK)).scalar_one())

    def _identity_statement(self) -> Any:
        # The cluster's system identifier (fixed when it was created) and the database's name.
        return _IDENTITY

    def _announce_plan(self, queues: set[str]) -> Plan[None]:
        # NOTIFY inside the caller's transaction: PostgreSQL delivers it when that commits, once
        # per queue however many enqueues of the transaction sent it (it folds duplicates).
        if not self._options.wakeups:
            return
        for queue in sorted(queues):
            yield Step(NOTIFY, {"queue": queue})

    def _is_deadlock(self, exc: BaseException) -> bool:
        return getattr(getattr(exc, "orig", exc), "sqlstate", None) == "40P01"

    def _is_outage(self, exc: BaseException) -> bool:
        return is_outage(exc)

    def _is_pending_conflict(self, exc: BaseException) -> bool:
        diag = getattr(getattr(exc, "orig", exc), "diag", None)
        return getattr(diag, "constraint_name", None) == PENDING_INDEX

    def _is_schema_missing(self, exc: BaseException) -> bool:
        orig = getattr(exc, "orig", exc)
        return getattr(orig, "sqlstate", None) in _SCHEMA_MISSING

    async def job_claim_many(self, request: ClaimRequest) -> ClaimBatch:
        if request.limited:  # a transaction of several statements: the shared plan
            return claimed_from_rows(await self._limited_rows(request))
        source, limit = request.source, request.limit
        values = self._claim_params(request, request.now)
        del values["b_limit"]  # written into the statement's text instead
        # The batch size is written into the statement (one prepared statement per size), so
        # the planner always knows how few rows the claim reads.
        # A claim that may take expired leases over records their attempts in its own
        # statement; one of ready jobs alone is the plain UPDATE.
        build = (
            (lambda: self._claim_statement(source, literal_limit=False))
            if source == "ready"
            else (lambda: claim_taking_over(source, self._claim_lock))
        )
        sql, defaults = self._compiled(f"claim_{source}", build)
        sql = sql.replace("%(b_limit)b", str(int(limit)))

        async def run() -> list[Any]:
            async with self._autocommit("job_claim", index_only=True) as driver:
                return await execute(driver, sql, {**defaults, **values})

        # A claim that dead-letters expired leases updates their batches' counts (migration
        # 0009's trigger), so it can deadlock with a finisher as acknowledgements can.
        return claimed_from_rows(await self._deadlock_retried(run))

    async def _limited_rows(self, request: ClaimRequest) -> list[Any]:
        """The rows of a limited claim; none when its session ended before it committed
        (logged once, see :mod:`~.limit_hold`)."""
        params = self._claim_params(request, request.now)
        progress = ClaimProgress()

        async def run() -> list[Any]:
            progress.xact = progress.rows = None
            progress.broken = False
            # Straight on psycopg, on a hot connection, in a transaction of its own (see
            # driver_plans): its statements and their rows skip SQLAlchemy's per-execution work.
            async with self._autocommit("job_claim", index_only=True) as driver:
                try:
                    plan = tapped(self._claim_plan(request, params), progress)
                    return await run_plan_on_driver(driver, plan, self._driver_statement)
                except psycopg.Error:
                    progress.broken = driver.broken
                    raise

        try:
            return await self._deadlock_retried(run)
        except StoreError as exc:
            if not progress.broken:
                raise
            # Lost before its COMMIT was sent: rolled back. Lost during it: ask the server.
            if progress.rows and await self._committed(progress.xact, exc):
                return progress.rows
            log_rolled_back(request.queue, self.limit_hold_timeout, exc)
            return []

    def _driver_statement(self, statement: Any) -> DriverStatement:
        """``statement`` (one the store keeps, see ``_statement``) compiled for
        :func:`run_plan_on_driver`, once."""
        cache: dict[int, tuple[Any, DriverStatement]] = self.__dict__.setdefault(
            "_driver_statements", {}
        )
        found = cache.get(id(statement))
        if found is None:
            # The statement is kept beside its text, so its id is never reused meanwhile.
            found = cache[id(statement)] = (
                statement,
                compile_statement(statement, self.engine.dialect),
            )
        return found[1]

    async def _committed(self, xact: str | None, lost: StoreError) -> bool:
        """Whether the transaction ``xact`` committed; ``lost`` is raised again when the
        server cannot say (no id was read, the transaction is still ending, or the server is
        out of reach)."""
        if xact is None:
            raise lost
        try:
            async with self._read("job_claim") as conn:
                status = (await conn.execute(XACT_STATUS, {"xact": xact})).scalar_one()
        except StoreError:
            raise lost from lost.__cause__
        if status not in ("committed", "aborted"):
            raise lost
        return bool(status == "committed")

    def _complete_statement(self) -> sa.Update:
        # Sent as one autocommit statement, so the commit's durability is set inside it: the
        # acknowledgement's commit returns before it reaches disk. If the database server itself
        # crashes in that window the acknowledgement is lost and the job runs again after its
        # lease expires (at-least-once allows that). Claims and enqueues stay fully durable.
        relaxed = sa.select(sa.func.set_config("synchronous_commit", "off", True))
        return self._complete_durable_statement().where(relaxed.scalar_subquery().is_not(None))

    async def job_complete_many(
        self,
        leases: Sequence[Lease],
        now: int,
        *,
        durable: bool = False,
        results: Mapping[UUID, str] | None = None,
        recorder: Recorder | None = None,
    ) -> set[UUID]:
        if not leases:
            return set()
        by = recorder or NOBODY
        fields = {**self._record_params(by, AttemptOutcome.COMPLETED), "b_now": now}
        # Only once a lease token passes the bound is a job's history trimmed (rarely): the
        # statement does that only then.
        trim = trimming((lease.token for lease in leases), by.attempt_history)
        plain, valued = split_results(leases, results)
        done = await self._complete_plain(plain, fields, durable, trim) if plain else set()
        if valued:
            done |= await self._complete_valued(valued, fields, durable, trim)
        return done

    async def _complete_plain(
        self, leases: Sequence[Lease], fields: dict[str, Any], durable: bool, trim: bool
    ) -> set[UUID]:
        values = {**self._held_params(leases), **fields}
        # A durable acknowledgement commits as the server's synchronous_commit says (on, by
        # default): the statement without the relaxing subquery.
        name, build = (
            ("complete_durable", self._complete_durable_statement)
            if durable
            else ("complete", self._complete_statement)
        )
        return await self._completed(
            f"{name}_{trim}", lambda: recording(build(), trimming=trim), values
        )

    async def _completed(
        self, name: str, build: Callable[[], Any], values: dict[str, Any]
    ) -> set[UUID]:
        """Run one acknowledgement statement, again when it lost a deadlock: finishing
        members of two batches locks their counts' rows in the order of the leases."""

        async def run() -> set[UUID]:
            async with self._autocommit("job_complete", index_only=True) as driver:
                rows = await self._run(driver, name, build, values)
            return {row[0] for row in rows}

        return await self._deadlock_retried(run)

    async def _complete_valued(
        self,
        valued: Sequence[tuple[Lease, str]],
        fields: dict[str, Any],
        durable: bool,
        trim: bool,
    ) -> set[UUID]:
        """Completions that store results: the same join against unnested arrays, with a
        third array of result texts, in one statement for the whole batch."""
        values = {
            **self._held_params([lease for lease, _ in valued]),
            "b_results": [text for _, text in valued],
            **fields,
        }

        def build() -> Any:
            held = _held_rows(with_results=True)
            stmt = queries.complete(_held_by(held), held.c.result)
            if not durable:
                stmt = stmt.where(_RELAXED.scalar_subquery().is_not(None))
            return recording(stmt, trimming=trim)

        name = f"complete_result_{'durable' if durable else 'relaxed'}_{trim}"
        return await self._completed(name, build, values)

    def _held_clause(self) -> sa.ColumnElement[bool]:
        # Two arrays instead of one placeholder pair per lease: the statement text is the same
        # for every batch size, so the server prepares it once.
        # The statement joins the jobs to the unnested pairs (UPDATE ... FROM), so the pairs
        # drive it: one primary-key probe per lease. The server reuses a generic plan for a
        # prepared statement, and for that plan it cannot know how many pairs there are; written
        # as ``(id, token) IN (SELECT ... unnest(...))`` it chose to re-scan the pairs for every
        # row, which made a large batch many times slower (figures in docs/performance.md).
        return _held_by(_held_rows(with_results=False))

    def _held_params(self, leases: Sequence[Lease]) -> dict[str, Any]:
        return {
            "b_ids": [lease.job_id for lease in leases],
            "b_tokens": [lease.token for lease in leases],
            "b_nonces": [lease.nonce for lease in leases],
        }

    async def _finished_estimate(self, conn: AsyncConnection, queue: str, state: str) -> int:
        # The planner's row estimate for the count's own condition, from the statistics
        # autovacuum's ANALYZE keeps (the extended statistics on queue and state included):
        # no row is read, however many finished jobs are retained.
        result = await conn.execute(_ESTIMATE, {"queue": queue, "state": state})
        plan = result.scalar_one()
        return int(plan[0]["Plan"]["Plan Rows"])

    def wakeups(self, queues: Sequence[str]) -> AsyncIterator[str] | None:
        if not self._options.wakeups:
            return None
        return listen(self._driver_dsn(), frozenset(queues))

    def queue_changes(self, queues: Sequence[str]) -> AsyncIterator[str] | None:
        if not self._options.wakeups:
            return None
        return listen(self._driver_dsn(), frozenset(queues), QUEUES_CHANNEL)

    async def _announce_cancelled(self, conn: AsyncConnection, job_ids: list[UUID]) -> None:
        # Inside the cancel's transaction: the workers hear of it exactly when it commits.
        for ids in notice_payloads(job_ids):
            await conn.execute(CANCEL_NOTIFY, {"ids": ids})

    def cancel_notices(self) -> AsyncIterator[UUID] | None:
        if not self._options.wakeups:
            return None
        return listen_cancels(self._driver_dsn())
