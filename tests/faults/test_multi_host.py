"""A queue on a multi-host URL (a primary and its standby, :mod:`tests.faults.replication`):
migrations, enqueues, a real worker and its wake-up feed all reach the server that accepts
writes, wherever it is in the list, and the wake-up feed follows the promotion of the standby
without being reopened."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from caravel import migrate
from caravel.store.postgresql import PostgresStore, create_engine
from tests.faults.harness import (
    QUEUE,
    Client,
    Effect,
    check,
    create_app_database,
    job_rows,
    start_worker,
    wait_until,
)
from tests.faults.ports import release_port, reserve_port
from tests.faults.replication import ReplicatedPair, pair_for_test

pytestmark = [pytest.mark.slow, pytest.mark.serial, pytest.mark.postgres]


@pytest.fixture
def pair() -> Iterator[ReplicatedPair]:
    with pair_for_test(synchronous=True) as made:
        yield made


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port nothing listens on (reserved, so no other private server takes it meanwhile)."""
    port = reserve_port()
    try:
        yield port
    finally:
        release_port(port)


def with_first(url: str, port: int) -> str:
    """``url`` (libpq's host-list spelling) with ``127.0.0.1:port`` listed before its hosts."""
    return url.replace("@127.0.0.1:", f"@127.0.0.1:{port},127.0.0.1:", 1)


def standby_first(pair: ReplicatedPair, database: str, spelling: str) -> str:
    """A URL listing the standby before the primary, in either spelling."""
    a, b = str(pair.primary.port), str(pair.standby.port)
    url = pair.url(database, spelling=spelling)
    return url.replace(a, "PRIMARY").replace(b, a).replace("PRIMARY", b)


@pytest.mark.parametrize("first", ["standby", "down"])
@pytest.mark.parametrize("spelling", ["hosts", "query"])
def test_a_queue_and_a_worker_on_a_multi_host_url_use_the_server_that_takes_writes(
    pair: ReplicatedPair, closed_port: int, tmp_path: Path, first: str, spelling: str
) -> None:
    primary_url = pair.create_database("queue")
    if first == "standby":
        url = standby_first(pair, "queue", spelling)
    elif spelling == "hosts":
        url = with_first(pair.url("queue"), closed_port)
    else:
        url = pair.url("queue", spelling="query").replace(
            "?host=", f"?host=127.0.0.1:{closed_port}&host=", 1
        )
    migrate.upgrade(url)
    ids = Client(url).enqueue(Effect(value=i) for i in range(20))
    assert set(job_rows(primary_url)) == set(ids)
    app_url = create_app_database("sqlite", tmp_path)
    worker = start_worker(url, app_url, tmp_path / "worker.log")
    try:
        wait_until(
            lambda: all(r.state == "completed" for r in job_rows(primary_url).values()),
            timeout=60,
            what="the worker to finish the jobs",
        )
    finally:
        assert worker.terminate() == 0, worker.log()
    check(primary_url, app_url, ids, logs=[worker.log()])
    assert "listener lost its connection" not in worker.log()  # it listened all along


@pytest.mark.parametrize("spelling", ["hosts", "query"])
async def test_the_wakeup_feed_follows_the_promoted_standby(
    pair: ReplicatedPair, spelling: str
) -> None:
    """The listener's connection dies with the primary; it reconnects through the same URL to
    the promoted standby and listens again, so a NOTIFY sent there reaches it."""
    primary_url = pair.create_database("queue")
    promoted_url = pair.database_url(pair.standby, "queue")
    url = pair.url("queue", spelling=spelling)
    store = PostgresStore(create_engine(url))
    feed = store.wakeups([QUEUE])
    assert feed is not None

    async def wake(on: str, within: float) -> str:
        """NOTIFY on ``on`` every 0.2 s until the feed hears one (it may not listen yet)."""
        waiting = asyncio.ensure_future(asyncio.wait_for(anext(feed), within))
        try:
            while not waiting.done():
                await asyncio.to_thread(_notify, on)
                await asyncio.wait({waiting}, timeout=0.2)
            return waiting.result()
        finally:
            waiting.cancel()

    try:
        assert await wake(primary_url, 15) == QUEUE
        took = await asyncio.to_thread(pair.fail_over)
        print(f"promotion took {took:.2f}s")
        assert await wake(promoted_url, 30) == QUEUE
    finally:
        await feed.aclose()  # type: ignore[attr-defined]
        await store.close()


def _notify(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        conn.execute("SELECT pg_notify('caravel_jobs', %s)", (QUEUE,))
