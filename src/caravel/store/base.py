"""The shared base of the SQL stores: every operation of the store protocol written once, in
portable SQLAlchemy Core.

Dialect modules subclass :class:`SqlStore` and supply only what differs: the INSERT construct with
``ON CONFLICT``, how claim candidates are locked, how a transaction begins, how schema errors are
recognised, and any push wake-ups. The transactions the operations run in, with their deadline and
error translation, are :mod:`caravel.store.transactions`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from caravel.attempts import AttemptOutcome
from caravel.jobs import JobState, Lease
from caravel.store import attempts, claims, outcomes, queries
from caravel.store.claims import nonces
from caravel.store.claims.takeover import expired_before, taking_over
from caravel.store.inserts.caller import CallerInserts
from caravel.store.inserts.general import SqlInserts
from caravel.store.inserts.pending import returning_key, with_key_given_up
from caravel.store.joined_completion import JoinedCompletions
from caravel.store.limited import LimitsStore
from caravel.store.links.statements import SqlLinks
from caravel.store.pausing import PausingStore
from caravel.store.plans import Plan, Step, record_plan, run_plan
from caravel.store.protocol import (
    ClaimBatch,
    ClaimRequest,
    ClaimSource,
    FailedAttempt,
    JobRef,
    ProgressUpdate,
    Recorder,
    SnoozedAttempt,
)
from caravel.store.pruning import PruneBatch, PruneRequest
from caravel.store.pruning.plan import prune_plan
from caravel.store.reads import SqlReads
from caravel.store.removal.statements import SqlRemoval
from caravel.store.rows import (
    claimed_from_rows,
)
from caravel.store.scaling import ScalingReads
from caravel.store.schedules import ScheduleStateStore
from caravel.store.schema import jobs
from caravel.store.transactions import ConnectionT
from caravel.store.workers import WorkerRegistry
from caravel.store.workflows.statements import SqlWorkflows

__all__ = ["SqlStore", "claimed_from_rows"]

_RUNNING = JobState.RUNNING.value

#: Who records outcomes when the caller does not say: an unknown worker, the default bound.
NOBODY = Recorder()

#: A claim's batch size, written into its statement's text.
_LIMIT = sa.bindparam("b_limit", type_=sa.Integer(), literal_execute=True)


def _failure_fields(failure: FailedAttempt) -> dict[str, Any]:
    """What a failed attempt's record says besides its outcome."""
    return {
        "category": failure.category,
        "error_class": failure.error_class,
        "detail": failure.detail,
        "retry_at": failure.retry_at,
    }


class SqlStore(
    SqlReads[ConnectionT],
    ScalingReads[ConnectionT],
    PausingStore[ConnectionT],
    LimitsStore[ConnectionT],
    ScheduleStateStore[ConnectionT],
    SqlWorkflows[ConnectionT],
    SqlRemoval[ConnectionT],
    SqlLinks[ConnectionT],
    SqlInserts[ConnectionT],
    CallerInserts[ConnectionT],
    JoinedCompletions[ConnectionT],
    WorkerRegistry[ConnectionT],
):
    """Queue operations over connections of the dialect's kind (``ConnectionT``), which its
    :meth:`_transaction` provides."""

    supports_listen_notify = False
    db_system = "sql"

    # ----- dialect hooks -------------------------------------------------------------------

    def _claim_target(self, candidates: sa.Select[Any]) -> sa.ColumnElement[bool]:
        """The rows a claim updates: those whose ids ``candidates`` picks."""
        return jobs.c.id.in_(candidates.scalar_subquery())

    def _claim_lock(self, picked: sa.Select[Any]) -> sa.Select[Any]:
        """The rows one source of a claim picks, locked where the database needs it."""
        return picked

    #: Whether :meth:`_recording` makes an outcome's statement write its attempt records
    #: itself; otherwise the operations insert them after it, in its transaction.
    _records_in_statement = False

    def _recording(
        self, update: sa.Update, *, given_back: bool = False, trimming: bool = False
    ) -> Any:
        """``update``, an outcome's statement returning the ids of the jobs it changed, as the
        statement that also records each one's attempt (:mod:`caravel.store.attempts`), bound
        as :meth:`_record_params` binds it (``given_back``: the update gave the attempt back,
        so the record's number is one more than the row's), where the dialect can; by default
        ``update`` itself. With ``trimming`` (a record's token passes ``b_keep``), it counts
        what the trim of each job's history deletes, and trims it where it records."""
        return attempts.counted(update) if trimming else update

    # ----- claim and acknowledge -----------------------------------------------------------

    def _claim_statement(
        self, source: ClaimSource, *, literal_limit: bool = True, unlimited: bool = True
    ) -> Any:
        """The claim for one source of jobs, picking rows the dialect's way (``unlimited``: of
        a queue without limits, see :func:`~caravel.store.claims.claim`): an ``UPDATE ...
        RETURNING``, or what the dialect's connections run as one."""
        return claims.claim(
            source,
            self._claim_target,
            self._claim_lock,
            literal_limit=literal_limit,
            unlimited=unlimited,
        )

    @staticmethod
    def _claim_params(request: ClaimRequest, now: int) -> dict[str, Any]:
        params = {
            "b_queue": request.queue,
            "b_limit": request.limit,
            "b_now": now,
            "b_expires": now + request.lease_ms,
            "b_worker": request.worker_id,
            "b_nonce": nonces.draw(),
        }
        if request.source != "ready":
            params["b_keep"] = request.attempt_history
        return params

    def _claim_plan(self, request: ClaimRequest, params: dict[str, Any]) -> Plan[list[Any]]:
        """The claim ``request`` asks for as a plan of its transaction: the limited one, or
        the plain one, which is its one statement for ready jobs and reads the expired leases
        it may take over first otherwise
        (:func:`~caravel.store.claims.takeover.taking_over`)."""
        if request.limited:
            return self._claim_limited(request, params)
        source = request.source
        stmt = self._statement(f"claim_{source}", lambda: self._claim_statement(source))
        before = None
        if source != "ready":
            read = self._statement("expired_before", lambda: expired_before(_LIMIT))
            before = Step(read, params)
        return taking_over(Step(stmt, params), before, request.attempt_history)

    async def job_claim_many(self, request: ClaimRequest) -> ClaimBatch:
        params = self._claim_params(request, request.now)
        single = request.source == "ready" and not request.limited

        async def run() -> list[Any]:
            async with self._write("job_claim", single=single) as conn:
                return await run_plan(conn.execute, self._claim_plan(request, params))

        return claimed_from_rows(await self._deadlock_retried(run))

    def _held_clause(self) -> sa.ColumnElement[bool]:
        """Rows still held by the leases bound as ``b_ids``/``b_pairs``: same id, same token,
        same nonce (:mod:`~caravel.store.claims.nonces`), still running. The ``id IN`` part lets
        the database answer from the primary key."""
        pairs = sa.bindparam(
            "b_pairs",
            expanding=True,
            type_=sa.TupleType(sa.Uuid(), sa.BigInteger(), sa.BigInteger()),
        )
        return sa.and_(
            jobs.c.id.in_(sa.bindparam("b_ids", expanding=True, type_=sa.Uuid())),
            sa.tuple_(jobs.c.id, jobs.c.lease_token, jobs.c.lease_nonce).in_(pairs),
            jobs.c.state == _RUNNING,
        )

    def _held_params(self, leases: Sequence[Lease]) -> dict[str, Any]:
        return {
            "b_ids": [lease.job_id for lease in leases],
            "b_pairs": [(lease.job_id, lease.token, lease.nonce) for lease in leases],
        }

    def _complete_statement(self) -> sa.Update:
        """The completion of the leases bound as :meth:`_held_clause` binds them; a dialect
        may relax its commit's durability (see :attr:`~caravel.WorkerOptions.durable_acks`)."""
        return self._complete_durable_statement()

    def _complete_durable_statement(self) -> sa.Update:
        """:meth:`_complete_statement` leaving the durability of the commit as it is."""
        return queries.complete(self._held_clause())

    def _complete_result_statement(self) -> sa.Update:
        return outcomes.complete_with_result(self._held_clause())

    @staticmethod
    def _record_params(
        recorder: Recorder,
        outcome: AttemptOutcome,
        *,
        category: str | None = None,
        error_class: str | None = None,
        detail: str | None = None,
        retry_at: int | None = None,
    ) -> dict[str, Any]:
        """What an outcome's statement binds for its attempt records: the bound of the history
        (``b_keep``, for a statement that trims) and the record's fields
        (:func:`caravel.store.attempts.record_of`), for a statement that writes the records
        itself (:meth:`_recording`) or copies them (:func:`caravel.store.attempts.recorded`)."""
        return {
            "b_keep": recorder.attempt_history,
            "b_worker": recorder.worker_id,
            "b_host": recorder.host,
            "b_pid": recorder.pid,
            "b_outcome": outcome.value,
            "b_category": category,
            "b_error_class": error_class,
            "b_detail": detail,
            "b_retry_at": retry_at,
        }

    async def _record(self, conn: ConnectionT, records: list[dict[str, Any]], keep: int) -> None:
        """Insert the attempt records of outcomes whose statements did not (see
        :attr:`_records_in_statement`), in their transaction, trimming under ``keep``."""
        if records and not self._records_in_statement:
            await run_plan(conn.execute, record_plan(records, keep))

    def _complete_plan(
        self,
        leases: Sequence[Lease],
        now: int,
        results: Mapping[UUID, str] | None,
        recorder: Recorder | None,
        *,
        durable: bool = False,
    ) -> Plan[set[UUID]]:
        """The completion of ``leases`` (see :meth:`job_complete_many`) as a plan of its
        transaction: the fenced statement, one per lease storing a result, then each completed
        job's attempt record where the statements did not write it. ``durable`` asks for the
        statement that leaves the commit's durability to the transaction (a caller's)."""
        by = recorder or NOBODY
        keep = by.attempt_history
        trim = attempts.trimming((lease.token for lease in leases), keep)
        plain, valued = outcomes.split_results(leases, results)
        kind = "complete_durable" if durable else "complete"
        build = self._complete_durable_statement if durable else self._complete_statement
        stmt = self._statement(f"{kind}_{trim}", lambda: self._recording(build(), trimming=trim))
        with_result = self._statement(
            f"complete_result_{trim}",
            lambda: self._recording(self._complete_result_statement(), trimming=trim),
        )
        fields = {"b_now": now, **self._record_params(by, AttemptOutcome.COMPLETED)}
        done: set[UUID] = set()
        if plain:
            rows = yield Step(stmt, {**self._held_params(plain), **fields})
            done.update(row[0] for row in rows)
        for lease, text in valued:  # in the same transaction as the rest of the batch
            params = {**self._held_params([lease]), **fields, "b_result": text}
            done.update(row[0] for row in (yield Step(with_result, params)))
        if done and not self._records_in_statement:  # each record, copied from its row
            yield Step(attempts.recorded(), {**fields, "b_done": list(done)})
            trims = attempts.lease_cuts(leases, keep, done)
            if trims:
                yield Step(attempts.trim(), trims)
        return done

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

        async def run() -> set[UUID]:
            async with self._write("job_complete", durable=durable) as conn:
                return await run_plan(
                    conn.execute, self._complete_plan(leases, now, results, recorder)
                )

        return await self._deadlock_retried(run)

    async def job_snooze_many(
        self,
        snoozes: Sequence[SnoozedAttempt],
        now: int,
        *,
        durable: bool = False,
        recorder: Recorder | None = None,
    ) -> set[UUID]:
        if not snoozes:
            return set()
        by = recorder or NOBODY
        keep = by.attempt_history
        trim = attempts.trimming((snoozed.lease.token for snoozed in snoozes), keep)
        outcome = AttemptOutcome.SNOOZED

        async def run(give_up: bool) -> set[UUID]:
            stmt = self._statement(
                f"snooze_{give_up}_{trim}",
                lambda: self._recording(
                    outcomes.snooze(self._held_clause(), returning_key(give_up)),
                    given_back=True,
                    trimming=trim,
                ),
            )
            done: set[UUID] = set()
            records: list[dict[str, Any]] = []
            async with self._write("job_snooze", durable=durable) as conn:
                for snoozed in snoozes:
                    lease, until = snoozed.lease, snoozed.until
                    params = {
                        **self._held_params([lease]),
                        **self._record_params(by, outcome, retry_at=until),
                        "b_now": now,
                        "b_until": until,
                    }
                    if (await conn.execute(stmt, params)).scalars().all():
                        done.add(lease.job_id)
                        records.append(attempts.record(lease, by, now, outcome, retry_at=until))
                await self._record(conn, records, keep)
            return done

        return await with_key_given_up(run, self._is_pending_conflict)

    async def job_fail_many(
        self,
        failures: Sequence[FailedAttempt],
        now: int,
        *,
        durable: bool = False,
        recorder: Recorder | None = None,
    ) -> set[UUID]:
        if not failures:
            return set()
        by = recorder or NOBODY
        keep = by.attempt_history

        async def run(give_up: bool) -> set[UUID]:
            done: set[UUID] = set()
            records: list[dict[str, Any]] = []
            key = returning_key(give_up)
            async with self._write("job_fail", durable=durable) as conn:
                for failure in failures:
                    lease = failure.lease
                    update = queries.fail(self._held_clause(), failure, now, key)
                    stmt = self._recording(update, trimming=lease.token > keep)
                    fields = _failure_fields(failure)
                    params = {
                        **self._held_params([lease]),
                        **self._record_params(by, failure.outcome, **fields),
                        "b_now": now,
                    }
                    if (await conn.execute(stmt, params)).scalars().all():
                        done.add(lease.job_id)
                        records.append(attempts.record(lease, by, now, failure.outcome, **fields))
                await self._record(conn, records, keep)
            return done

        return await self._deadlock_retried(
            lambda: with_key_given_up(run, self._is_pending_conflict)
        )

    async def job_renew_lease(self, lease: Lease, now: int, expires_at: int) -> Lease | None:
        stmt = queries.renew(self._held_clause(), now, expires_at)
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
            nonce=lease.nonce,
        )

    async def job_set_progress(self, update: ProgressUpdate) -> bool:
        has_progress, has_meta = update.progress is not None, update.meta is not None
        if not (has_progress or has_meta):
            return False
        stmt = self._statement(
            f"progress_{has_progress}_{has_meta}",
            lambda: queries.set_progress(self._held_clause(), progress=has_progress, meta=has_meta),
        )
        params = {
            **self._held_params([update.lease]),
            "b_now": update.now,
            "b_progress": update.progress,
            "b_meta": update.meta,
        }
        async with self._write("job_set_progress", single=True) as conn:
            found = (await conn.execute(stmt, params)).scalar_one_or_none()
        return found is not None

    # ----- replay and pruning ----------------------------------------------------------------

    async def job_replay(self, ref: JobRef, now: int) -> bool:
        async def run(give_up: bool) -> bool:
            async with self._write("job_replay", single=True) as conn:
                replayed = await conn.execute(queries.replay(ref, now, returning_key(give_up)))
                return replayed.scalar_one_or_none() is not None

        return await with_key_given_up(run, self._is_pending_conflict)

    async def job_prune(self, request: PruneRequest) -> PruneBatch:
        plan = prune_plan(request, lock_rows=self._prune_locks_rows)
        if request.dry_run:
            async with self._read("job_prune") as conn:
                return await run_plan(conn.execute, plan)
        async with self._write("job_prune") as conn:
            if not await self._prune_lock(conn):
                return PruneBatch(busy=True)
            return await run_plan(conn.execute, plan)

    #: Whether a prune batch locks the rows it picks (a database with concurrent writers).
    _prune_locks_rows = False

    async def _prune_lock(self, conn: ConnectionT) -> bool:
        """Take the one-pruner-at-a-time lock for this transaction; false when another holds
        it. By default there is nothing to take: the database has one writer at a time."""
        return True

    def wakeups(self, queues: Sequence[str]) -> AsyncIterator[str] | None:
        return None

    def queue_changes(self, queues: Sequence[str]) -> AsyncIterator[str] | None:
        return None

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        await self.engine.dispose()
