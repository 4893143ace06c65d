"""A limited claim that stalls while it holds its queue's limits row on PostgreSQL: the server
ends its session once it has waited the store's ``limit_hold_timeout`` for the next statement,
so another claimer's wait for the row is bounded, and the stalled claim, once it goes on, took
nothing: it returns an empty batch after one log line, the jobs it had picked are ready and
unchanged, and the same store claims them at its next call.

The stall is the claim's own event loop blocked, right after it locked the row or between its
last statement and its commit, as a SIGSTOPped worker's is (``tests/faults/test_limits_stall.py``
stops a real worker process); meanwhile another connection takes the row lock the way a claim
does and times its wait. A claim whose session went during its COMMIT is settled by its
transaction's status, read from the server: both answers are checked on real transactions."""

from __future__ import annotations

import logging
import time
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url

from caravel.errors import StoreError
from caravel.flow import ConcurrencyLimit
from caravel.store import postgresql
from caravel.store.plans import Plan
from caravel.store.protocol import ClaimRequest
from tests.store.conformance.builders import QUEUE, T0, claim, insert, new_job, status

pytestmark = pytest.mark.postgres

#: The bound the store under test is given: short, so the test is quick.
HOLD = 0.5
#: What the other claimer may wait beyond it (the server's timer, scheduling on a busy host).
SLACK = 2.0
ROLLED_BACK = "limited claim rolled back"


def _dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(False)


class StallingStore(postgresql.PostgresStore):
    """A PostgreSQL store whose first limited claim stalls at ``where`` (``"locked"``: after
    its statement that locks the limits row; ``"before_commit"``: after its last statement)
    for as long as another connection takes to lock the row: what a SIGSTOP there does to a
    worker's claim."""

    def __init__(self, url: str, where: str) -> None:
        super().__init__(postgresql.create_engine(url))
        self.limit_hold_timeout = HOLD
        self.where = where
        self.waited: list[float] = []
        self._dsn = _dsn(url)

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
        # Without the bound it would wait for as long as the stall lasts: here, for ever.
        gives_up = f"-c lock_timeout={round((HOLD + SLACK) * 2000)}"
        with psycopg.connect(self._dsn, connect_timeout=5, options=gives_up) as other:
            began = time.monotonic()
            found = other.execute(
                "SELECT queue FROM caravel_queue_limits WHERE queue = %s FOR UPDATE", [queue]
            ).fetchall()
            self.waited.append(time.monotonic() - began)
            other.rollback()
        assert found == [(queue,)]


@pytest.mark.parametrize("where", ["locked", "before_commit"])
async def test_a_stalled_limited_claim_is_ended_and_takes_nothing(
    pg_url: str, where: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = StallingStore(pg_url, where)
    try:
        await store.queue_limit_set(ConcurrencyLimit(queue=QUEUE, concurrency=5), T0)
        jobs = [new_job(n) for n in range(3)]
        await insert(store, jobs)
        before = [await status(store, job) for job in jobs]

        with caplog.at_level(logging.WARNING, logger="caravel.store"):
            batch = await claim(store, T0 + 1, limited=True)

        # The other claimer waited for the row (it was held), but no longer than the bound.
        [waited] = store.waited
        assert HOLD * 0.8 <= waited <= HOLD + SLACK
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


async def test_a_claim_that_does_not_stall_leaves_its_session_without_the_timeout(
    pg_url: str,
) -> None:
    store = postgresql.PostgresStore(postgresql.create_engine(pg_url))
    try:
        await store.queue_limit_set(ConcurrencyLimit(queue=QUEUE, concurrency=5), T0)
        await insert(store, [new_job(0)])
        batch = await claim(store, T0 + 1, limited=True)
        assert len(batch.claimed) == 1
        # The setting was the claim's transaction's only: the session it ran on (the store
        # keeps it for its next claim) is back to the server's default, so nothing else it
        # runs can be ended for sitting idle.
        assert len(store._hot.idle[True]) == 1  # the claim's, which the next block takes
        async with store._autocommit("test", index_only=True) as driver:
            cursor = await driver.execute("SHOW idle_in_transaction_session_timeout")
            assert await cursor.fetchone() == ("0",)
    finally:
        await store.close()


@pytest.mark.parametrize("committed", [True, False])
async def test_a_claim_lost_during_its_commit_is_settled_by_its_transaction_status(
    pg_url: str, committed: bool
) -> None:
    with psycopg.connect(_dsn(pg_url)) as other:
        xact = other.execute("SELECT pg_current_xact_id()::text").fetchone()
        assert xact is not None
        if committed:
            other.commit()
        else:
            other.rollback()
    store = postgresql.PostgresStore(postgresql.create_engine(pg_url))
    lost = StoreError("job_claim", "server closed the connection unexpectedly")
    try:
        assert await store._committed(xact[0], lost) is committed
    finally:
        await store.close()


async def test_a_claim_whose_transaction_status_is_unknown_raises_its_error(pg_url: str) -> None:
    store = postgresql.PostgresStore(postgresql.create_engine(pg_url))
    lost = StoreError("job_claim", "server closed the connection unexpectedly")
    try:
        with psycopg.connect(_dsn(pg_url)) as running:
            xact = running.execute("SELECT pg_current_xact_id()::text").fetchone()
            assert xact is not None
            # Still in progress: the claim's fate is not known yet, so the error stands.
            with pytest.raises(StoreError) as raised:
                await store._committed(xact[0], lost)
            assert raised.value is lost
        # No id read (the queue had no limits row): nothing to ask, the error stands.
        with pytest.raises(StoreError) as raised:
            await store._committed(None, lost)
        assert raised.value is lost
    finally:
        await store.close()
