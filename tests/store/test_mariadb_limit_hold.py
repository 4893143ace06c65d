"""A limited claim that stalls while it holds its queue's limits row on MariaDB: the server ends
its session once it has waited the store's ``limit_hold_timeout`` for the next statement
(``idle_transaction_timeout``, whole seconds), so another claimer's wait for the row is bounded,
and the stalled claim, once it goes on, took nothing: it returns an empty batch after one log
line, the jobs it had picked are ready and unchanged, and the same store claims them at its next
call. The bound is the claim's only: the session the store goes on with is back to the server's
setting.

The stall is the claim's own event loop blocked, right after it locked the row or between its
last statement and its commit, as a SIGSTOPped worker's is (``tests/faults/test_limits_stall.py``
stops a real worker process); meanwhile another connection takes the row lock the way a claim
does and times its wait. A claim whose session went during its COMMIT is settled by its rows:
both answers are checked on real transactions, the second with another worker having claimed
the same jobs since."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

import pymysql
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from caravel.errors import StoreError
from caravel.flow import ConcurrencyLimit
from caravel.store.mariadb import MariadbStore, create_engine
from caravel.store.plans import Plan, run_plan
from caravel.store.protocol import ClaimRequest
from tests.store.conformance.builders import LEASE_MS, QUEUE, T0, claim, insert, new_job, status

pytestmark = pytest.mark.mariadb

#: The bound the store under test is given: MariaDB's shortest, so the test is quick.
HOLD = 1.0
#: What the other claimer may wait beyond it (the server's timer, scheduling on a busy host).
SLACK = 2.0
ROLLED_BACK = "limited claim rolled back"


def _connect(url: str, *, lock_wait: int) -> Any:
    parsed = make_url(url)
    conn = pymysql.connect(
        host=parsed.host or "127.0.0.1",
        port=parsed.port or 3306,
        user=parsed.username or "root",
        password=parsed.password or "",
        database=parsed.database,
        connect_timeout=5,
        read_timeout=30,
    )
    with conn.cursor() as cursor:
        # Without the bound it would wait for as long as the stall lasts: here, for ever.
        cursor.execute(f"SET SESSION innodb_lock_wait_timeout = {lock_wait}")
    return conn


class StallingStore(MariadbStore):
    """A MariaDB store whose first limited claim stalls at ``where`` (``"locked"``: after its
    statement that locks the limits row; ``"before_commit"``: after its last statement) for as
    long as another connection takes to lock the row: what a SIGSTOP there does to a worker's
    claim."""

    def __init__(self, url: str, where: str) -> None:
        super().__init__(create_engine(url))
        self.limit_hold_timeout = HOLD
        self.where = where
        self.waited: list[float] = []
        self._url = url

    def _claim_limited(self, request: ClaimRequest, params: dict[str, Any]) -> Plan[list[Any]]:
        plan = super()._claim_limited(request, params)
        stalling = not self.waited
        rows = yield next(plan)  # the lock
        if stalling and self.where == "locked":
            self._stall(request.queue)
        try:
            while True:
                rows = yield plan.send(rows)
        except StopIteration as done:
            claimed: list[Any] = done.value
        if stalling and self.where == "before_commit":
            self._stall(request.queue)
        return claimed

    def _stall(self, queue: str) -> None:
        """Lock ``queue``'s limits row from another connection, as a claim does, while this
        store's claim holds it; keep how long that took."""
        other = _connect(self._url, lock_wait=round((HOLD + SLACK) * 2))
        try:
            with other.cursor() as cursor:
                began = time.monotonic()
                cursor.execute(
                    "SELECT queue FROM caravel_queue_limits WHERE queue = %s FOR UPDATE", [queue]
                )
                found = cursor.fetchall()
                self.waited.append(time.monotonic() - began)
            other.rollback()
        finally:
            other.close()
        assert list(found) == [(queue,)]


async def _idle_timeout(store: MariadbStore) -> int:
    async with store._read("probe") as conn:
        found = await conn.execute(sa.text("SELECT @@SESSION.idle_transaction_timeout"))
        return int(found.scalar_one())


@pytest.mark.parametrize("where", ["locked", "before_commit"])
async def test_a_stalled_limited_claim_is_ended_and_takes_nothing(
    mariadb_url: str, where: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = StallingStore(mariadb_url, where)
    try:
        await store.queue_limit_set(ConcurrencyLimit(queue=QUEUE, concurrency=5), T0)
        jobs = [new_job(n) for n in range(3)]
        await insert(store, jobs)
        before = [await status(store, job) for job in jobs]

        with caplog.at_level(logging.WARNING, logger="caravel.store"):
            batch = await claim(store, T0 + 1, limited=True)

        # The other claimer waited for the row (it was held), but no longer than the bound.
        [waited] = store.waited
        # (The lower bound only shows it was held: the server's timer starts before ours does.)
        assert HOLD * 0.5 <= waited <= HOLD + SLACK
        # Rolled back: nothing claimed, every job as it was.
        assert batch.claimed == []
        assert batch.dead_lettered == 0
        assert [await status(store, job) for job in jobs] == before
        # One line, naming the queue, with no traceback.
        [record] = [r for r in caplog.records if r.name == "caravel.store"]
        assert record.levelno == logging.WARNING
        assert record.exc_info is None
        assert record.queue == QUEUE  # type: ignore[attr-defined]
        assert ROLLED_BACK in record.getMessage()

        # The store goes on: its next claim takes the jobs, through a new session.
        again = await claim(store, T0 + 2, limited=True)
        assert sorted(job.job_id for job in again.claimed) == sorted(job.id for job in jobs)
        assert len(store.waited) == 1
    finally:
        await store.close()


async def test_the_bound_is_the_limited_claims_only(mariadb_url: str) -> None:
    store = MariadbStore(create_engine(mariadb_url, pool_size=1))
    store.limit_hold_timeout = 2.5
    try:
        # Inside a limited claim's transaction the session is bounded, in whole seconds.
        async with store._deadline(readonly=False, hold=True) as conn:
            inside = await conn.execute(sa.text("SELECT @@SESSION.idle_transaction_timeout"))
            assert int(inside.scalar_one()) == 3
        # Back to the server's setting once it ended, on the session the store goes on with
        # (its pool keeps one), so nothing else the store runs there is ended for sitting idle.
        assert await _idle_timeout(store) == 0
        await store.queue_limit_set(ConcurrencyLimit(queue=QUEUE, concurrency=5), T0)
        await insert(store, [new_job(0)])
        batch = await claim(store, T0 + 1, limited=True)
        assert len(batch.claimed) == 1
        assert await _idle_timeout(store) == 0
    finally:
        await store.close()


def _stall() -> None:
    """Block the event loop past the bound: the server sees the session sit idle."""
    time.sleep(HOLD + 1.5)


async def _sit_idle_in_a_claim(store: MariadbStore, lock: Any) -> None:
    async with store._translated("probe"), store._deadline(readonly=False, hold=True) as conn:
        await conn.execute(lock)
        _stall()
        await conn.execute(sa.text("SELECT 1"))


async def test_only_a_limited_claims_session_is_ended_for_sitting_idle(mariadb_url: str) -> None:
    store = MariadbStore(create_engine(mariadb_url, pool_size=1))
    store.limit_hold_timeout = HOLD
    lock = sa.text("SELECT id FROM caravel_jobs FOR UPDATE")
    try:
        # Another transaction of the store's may wait past the bound: the server leaves it.
        async with store._write("probe") as conn:
            await conn.execute(lock)
            _stall()
            assert (await conn.execute(sa.text("SELECT 1"))).scalar_one() == 1
        # A limited claim's may not: its next statement finds the session gone.
        with pytest.raises(StoreError) as raised:
            await _sit_idle_in_a_claim(store, lock)
        assert getattr(raised.value.__cause__, "connection_invalidated", False), raised.value
        # The store goes on, on a new session without the bound.
        assert await _idle_timeout(store) == 0
    finally:
        await store.close()


@pytest.mark.parametrize("committed", [True, False])
async def test_a_claim_lost_during_its_commit_is_settled_by_its_rows(
    mariadb_url: str, committed: bool
) -> None:
    store = MariadbStore(create_engine(mariadb_url))
    lost = StoreError("job_claim", "Lost connection to server during query")
    worker, other = uuid.uuid4(), uuid.uuid4()
    try:
        await store.queue_limit_set(ConcurrencyLimit(queue=QUEUE, concurrency=5), T0)
        jobs = [new_job(n) for n in range(2)]
        await insert(store, jobs)
        request = ClaimRequest(QUEUE, 10, T0 + 1, LEASE_MS, "any", limited=True, worker_id=worker)
        params = store._claim_params(request, request.now)
        rows: list[Any] = []

        class Undo(Exception):
            pass

        try:
            async with store._write("job_claim") as conn:
                rows = await run_plan(conn.execute, store._claim_plan(request, params))
                if not committed:
                    raise Undo
        except Undo:
            # Another worker claims the same jobs, under the same lease tokens: not this claim.
            again = await claim(store, T0 + 1, limited=True, worker_id=other)
            assert len(again.claimed) == 2
        assert len(rows) == 2
        assert await store._committed(rows, request, lost) is committed
    finally:
        await store.close()
