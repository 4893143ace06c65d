"""The MariaDB store: the shared operations on InnoDB at ``READ COMMITTED``, claims picking their
rows with ``FOR UPDATE SKIP LOCKED``, and workers woken by polling (MariaDB has no
LISTEN/NOTIFY). What MariaDB's SQL lacks is done by its connections
(:mod:`~caravel.store.mariadb.execution`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from caravel.errors import StoreError
from caravel.jobs import Lease
from caravel.store import claims
from caravel.store.base import SqlStore
from caravel.store.claims.sources import due_ids
from caravel.store.inserts.pending import PENDING_INDEX
from caravel.store.limited.hold import LIMIT_HOLD_TIMEOUT, log_claim_rolled_back
from caravel.store.mariadb import compiling  # noqa: F401  (registers MariaDB's SQL)
from caravel.store.mariadb.connections import cut
from caravel.store.mariadb.execution import PICKED, MariaConnection, Picked, expanded
from caravel.store.mariadb.key_jobs import numbered_key_jobs
from caravel.store.mariadb.limit_hold import HELD, HOLD, UNHOLD, held_params, hold_seconds
from caravel.store.mariadb.outages import is_outage
from caravel.store.mariadb.releases import releases_plan
from caravel.store.mariadb.upserts import MariaInsert
from caravel.store.plans import Plan, run_plan
from caravel.store.protocol import ClaimRequest
from caravel.store.rows import claimed_from_rows
from caravel.store.schema import jobs
from caravel.store.schema import queue_limits as queue_limits_table
from caravel.store.schema import queues as queues_table
from caravel.store.schema import schedules as schedules_table
from caravel.store.values import ClaimBatch, ClaimSource, InsertOutcome, NewJob, Recorder

__all__ = ["MariadbStore"]

#: MariaDB's error numbers the store tells apart.
_DEADLOCK = 1213
_LOCK_WAIT_TIMEOUT = 1205
_DUPLICATE_KEY = 1062
_NO_SUCH_TABLE = 1146
_NO_SUCH_COLUMN = 1054

_IDENTITY = sa.text("SELECT CONCAT(@@hostname, ':', @@port, '/', DATABASE()) AS identity").columns(
    identity=sa.String
)


#: Where a connection notes that its session runs under a limited claim's bound
#: (``Connection.info``, which the pool clears when it replaces the connection).
_HELD = "caravel_limit_hold"


def _error_number(exc: BaseException) -> int | None:
    """MariaDB's number for a driver error (wrapped by SQLAlchemy or not)."""
    args = getattr(getattr(exc, "orig", exc), "args", ())
    return args[0] if args and isinstance(args[0], int) else None


class MariadbStore(SqlStore[MariaConnection]):
    db_system = "mariadb"

    def _insert(self) -> Any:
        return MariaInsert(jobs)

    def _queues_insert(self) -> Any:
        return MariaInsert(queues_table)

    def _schedules_insert(self) -> Any:
        return MariaInsert(schedules_table)

    def _queue_limits_insert(self) -> Any:
        return MariaInsert(queue_limits_table)

    def _claim_lock(self, picked: sa.Select[Any]) -> sa.Select[Any]:
        return picked.with_for_update(skip_locked=True)

    # A fair claim numbers each key's jobs: MariaDB has no LATERAL.
    _fair_key_jobs = staticmethod(numbered_key_jobs)

    def _limit_lock(self, read: sa.Select[Any]) -> sa.Select[Any]:
        # The queue's limited claims take turns on its limits row: each counts the running jobs
        # only once the claim before it committed. A claimer that stalls holding it is cut off
        # after limit_hold_timeout (see job_claim_many).
        return read.with_for_update()

    #: Seconds a limited claim's transaction may wait for its next statement (holding the
    #: queue's limits row) before the server ends its session (:mod:`~.limit_hold`); MariaDB
    #: counts whole seconds, rounded up here.
    limit_hold_timeout = LIMIT_HOLD_TIMEOUT

    async def job_claim_many(self, request: ClaimRequest) -> ClaimBatch:
        if not request.limited:
            return await super().job_claim_many(request)
        return claimed_from_rows(await self._limited_rows(request))

    async def _limited_rows(self, request: ClaimRequest) -> list[Any]:
        """The rows of a limited claim, run under the bound; none when its session ended
        before it committed (logged once, see :mod:`~.limit_hold`)."""
        params = self._claim_params(request, request.now)
        finished: list[list[Any]] = []  # the claim's rows once only its commit was left

        async def run() -> list[Any]:
            finished.clear()
            async with (
                self._translated("job_claim"),
                self._deadline(readonly=False, hold=True) as conn,
            ):
                rows = await run_plan(conn.execute, self._claim_plan(request, params))
                finished.append(rows)
                return rows

        try:
            return await self._deadlock_retried(run)
        except StoreError as exc:
            if not _connection_lost(exc):
                raise
            # Lost before its COMMIT was sent: rolled back. Lost during it: read the rows.
            if finished and await self._committed(finished[0], request, exc):
                return finished[0]
            log_claim_rolled_back(request.queue, self.limit_hold_timeout, "connection_lost")
            return []

    async def _committed(self, rows: list[Any], request: ClaimRequest, lost: StoreError) -> bool:
        """Whether the limited claim that returned ``rows`` committed, read from its jobs;
        ``lost`` is raised again when the server cannot be asked."""
        params = held_params(rows, request.worker_id)
        if params is None:  # it leased nothing, committed or not
            return False
        try:
            async with self._write("job_claim") as conn:
                found = (await conn.execute(HELD, params)).all()
        except StoreError:
            raise lost from lost.__cause__
        return bool(found)

    def _claim_target(self, candidates: sa.Select[Any]) -> sa.ColumnElement[bool]:
        # A limited claim's candidates (its queue's claims take turns on the limits row): read
        # through a derived table, as MariaDB takes no LIMIT inside IN (...).
        picked = candidates.subquery("picked")
        return jobs.c.id.in_(sa.select(picked.c.id))

    def _claim_statement(
        self, source: ClaimSource, *, literal_limit: bool = True, unlimited: bool = True
    ) -> Any:
        # The rows are picked by a statement of their own, skipping those other workers hold,
        # then updated by id: expired leases first, for "any".
        def by_id(_candidates: sa.Select[Any]) -> sa.ColumnElement[bool]:
            return jobs.c.id.in_(sa.bindparam(PICKED, expanding=True, type_=sa.Uuid()))

        update = claims.claim(
            source, by_id, self._claim_lock, literal_limit=False, unlimited=unlimited
        )
        now = sa.bindparam("b_now", type_=sa.BigInteger())
        limit = sa.bindparam("b_limit", type_=sa.Integer())
        sources: tuple[ClaimSource, ...] = ("expired", "ready") if source == "any" else (source,)
        picks = tuple(
            due_ids(name, now, limit, self._claim_lock, unlimited=unlimited) for name in sources
        )
        return Picked(picks, update)

    async def _insert_general(self, new_jobs: Sequence[NewJob]) -> list[InsertOutcome]:
        # Inserts of one key by two producers lock its index entry in turn; InnoDB may pick one
        # as a deadlock's victim. Its transaction changed nothing, and the same rows under the
        # same ids insert or settle the same way when tried again.
        return await self._deadlock_retried(
            lambda: super(MariadbStore, self)._insert_general(new_jobs)
        )

    def _insert_plan(self, new_jobs: Sequence[NewJob]) -> Plan[list[InsertOutcome]]:
        # Run on a connection the caller owns too: every statement one MariaDB runs as is.
        return expanded(super()._insert_plan(new_jobs))

    # Prunes of two processes pick different rows (SKIP LOCKED), so they need no turns.
    _prune_locks_rows = True

    def _joined_complete_plan(
        self, lease: Lease, now: int, result: str | None, recorder: Recorder | None
    ) -> Plan[bool]:
        # The caller's connection runs plain statements only: the completion as MariaDB runs
        # it, then the releases its trigger asked for, in the caller's transaction.
        held = yield from expanded(super()._joined_complete_plan(lease, now, result, recorder))
        yield from releases_plan()
        return held

    def _identity_statement(self) -> Any:
        return _IDENTITY

    def _is_deadlock(self, exc: BaseException) -> bool:
        return _error_number(exc) in (_DEADLOCK, _LOCK_WAIT_TIMEOUT)

    def _is_outage(self, exc: BaseException) -> bool:
        return is_outage(exc)

    def _is_pending_conflict(self, exc: BaseException) -> bool:
        orig = getattr(exc, "orig", exc)
        return _error_number(exc) == _DUPLICATE_KEY and PENDING_INDEX in str(orig)

    def _is_schema_missing(self, exc: BaseException) -> bool:
        return _error_number(exc) in (_NO_SUCH_TABLE, _NO_SUCH_COLUMN)

    def _sever(self, conn: MariaConnection) -> None:
        cut(conn.conn)

    @asynccontextmanager
    async def _transaction(
        self, *, readonly: bool, durable: bool = True, single: bool = False, hold: bool = False
    ) -> AsyncIterator[MariaConnection]:
        # Every operation is a transaction, even a single statement: one the shared code wrote
        # as one statement may be several here (see MariaConnection). InnoDB makes each commit
        # durable as the server is configured to (innodb_flush_log_at_trx_commit), whatever
        # the operation asks. With hold (a limited claim), the server ends the session if the
        # transaction waits over limit_hold_timeout for its next statement.
        if hold:
            async with self._held_transaction() as conn:
                yield conn
            return
        async with self.engine.begin() as conn:
            if _HELD in conn.info:  # a limited claim's that could not take its bound off
                await conn.exec_driver_sql(UNHOLD)
                del conn.info[_HELD]
            yield MariaConnection(conn)

    @asynccontextmanager
    async def _held_transaction(self) -> AsyncIterator[MariaConnection]:
        """A transaction whose session the server ends once it has waited
        ``limit_hold_timeout`` for a statement; the bound is the transaction's only."""
        async with self.engine.connect() as conn:
            try:
                async with conn.begin():
                    if _HELD not in conn.info:
                        conn.info[_HELD] = True
                        seconds = hold_seconds(self.limit_hold_timeout)
                        await conn.exec_driver_sql(HOLD.format(seconds=seconds))
                    yield MariaConnection(conn)
            finally:
                await _unhold(conn)


def _connection_lost(exc: StoreError) -> bool:
    """Whether ``exc`` came with its connection gone (the session too, and with it whatever
    its transaction had not committed)."""
    cause = exc.__cause__
    return bool(getattr(cause, "connection_invalidated", False)) or isinstance(cause, OSError)


async def _unhold(conn: AsyncConnection) -> None:
    """Take a limited claim's bound off its session, straight on the driver (outside any
    transaction: the claim's has ended, and SQLAlchemy would open another). A connection that
    cannot is discarded; one whose session already went has nothing to take off."""
    if conn.invalidated or _HELD not in conn.info:
        return
    try:
        raw = await conn.get_raw_connection()
        cursor = raw.driver_connection.cursor()  # type: ignore[union-attr]
        try:
            await cursor.execute(UNHOLD)
        finally:
            await cursor.close()
    except Exception:  # the link failed under it: the pool opens a new connection instead
        await conn.invalidate()
    else:
        del conn.info[_HELD]
