"""The MariaDB store's sessions on a real server: an operation stuck past its deadline has its
connection cut (the link may have stopped answering), and the session every connection starts
with is the one the store's statements rely on."""

from __future__ import annotations

import asyncio
import logging

import pytest
import sqlalchemy as sa

from caravel.errors import StoreError
from caravel.store.mariadb import MariadbStore, create_engine
from tests.support import Add, dispatch, open_queue

pytestmark = pytest.mark.mariadb


async def test_an_operation_past_its_deadline_has_its_connection_cut(mariadb_url: str) -> None:
    store = MariadbStore(create_engine(mariadb_url))
    store.operation_timeout = 0.5
    try:
        # The server would answer after 20 s: only the cut ends the operation before that,
        # as a database error of the operation.
        with pytest.raises(StoreError, match="database error during probe"):
            async with store._write("probe") as conn:
                await conn.execute(sa.text("SELECT SLEEP(20)"))
        # The pool replaced the cut connection: the store goes on working.
        store.operation_timeout = 45.0
        async with store._read("probe") as conn:
            assert (await conn.execute(sa.text("SELECT 1"))).scalar_one() == 1
    finally:
        await store.close()


async def test_sessions_run_read_committed_with_standard_assignments(mariadb_url: str) -> None:
    store = MariadbStore(create_engine(mariadb_url))
    try:
        async with store._read("probe") as conn:
            row = (
                await conn.execute(
                    sa.text("SELECT @@tx_isolation, @@sql_mode, @@max_statement_time")
                )
            ).one()
    finally:
        await store.close()
    isolation, modes, statement_time = row
    assert isolation == "READ-COMMITTED"
    assert {"SIMULTANEOUS_ASSIGNMENT", "STRICT_ALL_TABLES"} <= set(modes.split(","))
    assert float(statement_time) == 30.0


async def test_a_skipped_duplicate_leaves_its_key_in_no_log(
    mariadb_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # INSERT IGNORE warns "Duplicate entry '<key>'"; the driver logs the warnings it fetches.
    caplog.set_level(logging.DEBUG)
    async with open_queue(mariadb_url) as queue:
        first = await queue.enqueue(Add(1), dispatch("secret-key-7c1f"))
        again = await queue.enqueue(Add(1), dispatch("secret-key-7c1f"))
    assert (again.job_id, again.already_enqueued) == (first.job_id, True)
    leaked = [r for r in caplog.records if "secret-key-7c1f" in r.getMessage()]
    assert [r.name for r in leaked if not r.name.startswith("sqlalchemy")] == []


async def test_a_cancel_that_lands_while_connecting_is_never_swallowed(mariadb_url: str) -> None:
    """asyncmy waits for its socket with ``asyncio.wait_for``, which before Python 3.12 returns
    the connection instead of raising when the cancel lands just as the socket is ready; the
    store's connect raises it all the same. Every operation here opens a fresh connection, and
    the cancel lands at each step of the connect in turn, the window included."""
    store = MariadbStore(create_engine(mariadb_url))

    async def probe() -> None:
        async with store._read("probe") as conn:
            await conn.execute(sa.text("SELECT 1"))

    outcomes: dict[str, int] = {}
    try:
        for _ in range(3):
            for steps in range(20):
                await store.engine.dispose()  # the next operation connects afresh
                task = asyncio.create_task(probe())
                for _ in range(steps):
                    await asyncio.sleep(0)
                if task.done():
                    outcomes["finished before the cancel"] = steps
                    continue
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    outcomes["cancelled"] = steps
                else:
                    outcomes["returned after its cancel"] = steps
    finally:
        await store.close()
    assert "cancelled" in outcomes
    assert "returned after its cancel" not in outcomes, outcomes
