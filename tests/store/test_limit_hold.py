"""A limited claim that stalls while it holds its queue's limits row on PostgreSQL: the server
ends its session once it has waited the store's ``limit_hold_timeout`` for the next statement,
so another claimer's wait for the row is bounded, and the stalled claim, once it goes on, took
nothing: it returns an empty batch after one log line, the jobs it had picked are ready and
unchanged, and the same store claims them at its next call.

The stall is the claim's own event loop blocked between its last statement and its commit, as
a SIGSTOPped worker's is (``tests/faults/test_limits_stall.py`` stops a real worker process
there); meanwhile another connection takes the row lock the way a claim does and times its
wait."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url

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


class StallingStore(postgresql.PostgresStore):
    """A PostgreSQL store whose limited claims that took jobs stall before they commit, for as
    long as :attr:`stall` takes: what a SIGSTOP at that point does to a worker's claim."""

    def __init__(self, url: str) -> None:
        super().__init__(postgresql.create_engine(url))
        self.limit_hold_timeout = HOLD
        self.stalls = 0
        self.waited: list[float] = []
        self._dsn = make_url(url).set(drivername="postgresql").render_as_string(False)

    def _claim_limited(self, request: ClaimRequest, params: dict[str, Any]) -> Plan[list[Any]]:
        claimed = yield from super()._claim_limited(request, params)
        if claimed and not self.stalls:
            self.stalls += 1
            self.waited.append(self._take_the_row_as_another_claim(request.queue))
        return claimed

    def _take_the_row_as_another_claim(self, queue: str) -> float:
        """Lock ``queue``'s limits row from another connection, as a claim does, while this
        store's claim holds it; how long that took."""
        # Without the bound it would wait for as long as the stall lasts: here, for ever.
        gives_up = f"-c lock_timeout={round((HOLD + SLACK) * 2000)}"
        with psycopg.connect(self._dsn, connect_timeout=5, options=gives_up) as other:
            began = time.monotonic()
            found = other.execute(
                "SELECT queue FROM caravel_queue_limits WHERE queue = %s FOR UPDATE", [queue]
            ).fetchall()
            waited = time.monotonic() - began
            other.rollback()
        assert found == [(queue,)]
        return waited


@pytest.fixture
async def store(pg_url: str) -> AsyncIterator[StallingStore]:
    opened = StallingStore(pg_url)
    try:
        yield opened
    finally:
        await opened.close()


async def test_a_stalled_limited_claim_is_ended_and_takes_nothing(
    store: StallingStore, caplog: pytest.LogCaptureFixture
) -> None:
    await store.queue_limit_set(ConcurrencyLimit(queue=QUEUE, concurrency=5), T0)
    jobs = [new_job(n) for n in range(3)]
    await insert(store, jobs)
    before = [await status(store, job) for job in jobs]

    with caplog.at_level(logging.WARNING, logger="caravel.store"):
        batch = await claim(store, T0 + 1, limited=True)

    # The other claimer waited for the row (it was held), but no longer than the bound allows.
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
    assert "rolled it back" in record.getMessage()

    # The store goes on: its next claim takes the jobs, through a new session.
    again = await claim(store, T0 + 2, limited=True)
    assert sorted(job.job_id for job in again.claimed) == sorted(job.id for job in jobs)
    assert store.stalls == 1


async def test_a_claim_that_does_not_stall_leaves_its_session_without_the_timeout(
    pg_url: str,
) -> None:
    opened = postgresql.PostgresStore(postgresql.create_engine(pg_url, pool_size=1))
    try:
        await opened.queue_limit_set(ConcurrencyLimit(queue=QUEUE, concurrency=5), T0)
        await insert(opened, [new_job(0)])
        batch = await claim(opened, T0 + 1, limited=True)
        assert len(batch.claimed) == 1
        # The setting was the claim's transaction's only: the pool's one session is back to
        # the server's default, so nothing else it runs can be ended for sitting idle.
        async with opened.engine.connect() as conn:
            shown = await conn.exec_driver_sql("SHOW idle_in_transaction_session_timeout")
            assert shown.scalar() == "0"
    finally:
        await opened.close()
