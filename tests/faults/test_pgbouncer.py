"""Caravel behind a real PgBouncer in transaction pooling mode (its own process, see
:mod:`tests.faults.pgbouncer`).

What breaks there without the settings the guide gives: a LISTEN lasts only as long as the
transaction that ran it, so its notifications reach a server connection no client holds (PgBouncer
drops them and closes that connection); and a prepared statement outlives its transaction on a
server connection another client gets next (psycopg then fails with "prepared statement already
exists"). With ``pool_mode=transaction`` in the URL the store prepares nothing, sends no NOTIFY
and keeps no session setting, and a ``--polling-only`` worker drains what producers enqueue,
everything through PgBouncer."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from caravel.store.postgresql.notifications import CHANNEL, listen
from tests.faults.harness import (
    Client,
    Effect,
    Worker,
    all_terminal,
    clear_app_database,
    read_effects,
    wait_until,
)
from tests.faults.pgbouncer import PgBouncer, pgbouncer_unavailable, running_pgbouncer
from tests.support import until, within
from tests.support.databases import IN_CI, until_listening

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

PRODUCERS = 4
ONE_BY_ONE = 50
BULK = 200


@pytest.fixture
def bouncer(pg_url: str) -> Iterator[PgBouncer]:
    reason = pgbouncer_unavailable()
    if reason is not None:
        if IN_CI:  # CI installs it (.ci/run): missing there is a failure, not a skip
            pytest.fail(reason)
        pytest.skip(reason)
    with running_pgbouncer(pg_url) as running:
        yield running


def _pooled(bouncer: PgBouncer, pg_url: str) -> str:
    return str(make_url(bouncer.url(pg_url)).update_query_dict({"pool_mode": "transaction"}))


def test_a_polling_only_worker_drains_jobs_enqueued_through_pgbouncer(
    pg_url: str, pg_app_session_url: str, bouncer: PgBouncer, logs: Path
) -> None:
    clear_app_database(pg_app_session_url)
    url = _pooled(bouncer, pg_url)
    # One-job enqueues from concurrent producers share PgBouncer's few server connections
    # (a prepared statement would collide there), then bulk enqueues.
    clients = [
        Client(url).start(Effect(value=p * ONE_BY_ONE + i) for i in range(ONE_BY_ONE))
        for p in range(PRODUCERS)
    ]
    for client in clients:
        client.join()
    bulk = Client(url)
    bulk.enqueue((Effect(value=-i) for i in range(BULK)), batch_size=100)
    acknowledged = [job for c in [*clients, bulk] for job in c.acknowledged]
    assert [e for c in [*clients, bulk] for e in c.errors] == []
    assert len(acknowledged) == PRODUCERS * ONE_BY_ONE + BULK

    worker = Worker(
        url,
        pg_app_session_url,
        logs / "worker.log",
        concurrency=4,
        extra_args=["--polling-only", "--poll-interval", "0.2"],
    )
    try:
        wait_until(
            lambda: all_terminal(pg_url, expected=len(acknowledged)),
            timeout=120,
            what="every job done through PgBouncer",
        )
    finally:
        worker.terminate()
    effects = read_effects(pg_app_session_url)
    assert sorted(effects) == sorted(acknowledged)  # each job once, no other
    assert "Error" not in worker.log(), worker.log()


def test_listen_through_transaction_pooling_hears_nothing(pg_url: str, bouncer: PgBouncer) -> None:
    """Why workers behind PgBouncer must poll: the notification reaches the server connection
    the LISTEN ran on after PgBouncer has unlinked it from the client, and is dropped."""
    dsn = make_url(bouncer.url(pg_url)).set(drivername="postgresql").render_as_string(False)
    direct = make_url(pg_url).set(drivername="postgresql").render_as_string(False)
    with (
        psycopg.connect(dsn, autocommit=True, prepare_threshold=None) as listener,
        psycopg.connect(direct, autocommit=True) as sender,
    ):
        listener.execute("LISTEN caravel_pgbouncer_probe")
        sender.execute("NOTIFY caravel_pgbouncer_probe, 'hello'")
        wait_until(
            lambda: "from server when not linked" in bouncer.log(),
            what="PgBouncer to drop the notification",
        )
        listener.execute("SELECT 1")  # anything pending would have been read by now
        assert list(listener.notifies(timeout=0.1, stop_after=1)) == []


async def test_a_listener_behind_transaction_pooling_warns_once(
    pg_url: str, bouncer: PgBouncer, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker left listening through PgBouncer (the URL without pool_mode=transaction) never
    hears its own probe, and says what to change, once."""
    caplog.set_level(logging.WARNING, logger="caravel.store")
    dsn = make_url(bouncer.url(pg_url)).set(drivername="postgresql").render_as_string(False)
    feed = listen(dsn, frozenset({"q"}), probe_within=0.5)
    hearing = asyncio.ensure_future(anext(feed))
    try:
        await until(lambda: "LISTEN does not hold" in caplog.text, what="the warning")
        # The probe went to the server connection holding the LISTEN while no client, or
        # another client (the probe's sender, given that same connection), was linked to it.
        assert not hearing.done()
        said = [r for r in caplog.records if "LISTEN does not hold" in r.getMessage()]
        assert len(said) == 1
    finally:
        hearing.cancel()
        await asyncio.gather(hearing, return_exceptions=True)
        await feed.aclose()


async def test_a_direct_listener_hears_its_probe_and_never_warns(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="caravel.store")
    direct = make_url(pg_url).set(drivername="postgresql").render_as_string(False)
    feed = listen(direct, frozenset({"q"}), probe_within=0.2)
    hearing = asyncio.ensure_future(anext(feed))
    try:
        await until_listening(pg_url, CHANNEL)
        # Past the probe's real-time bound (the driver's own timeout: no clock to move).
        await asyncio.sleep(0.5)
        async with await psycopg.AsyncConnection.connect(direct, autocommit=True) as sender:
            await sender.execute("SELECT pg_notify(%s, 'q')", (CHANNEL,))
        assert await within(hearing) == "q"
        assert "LISTEN does not hold" not in caplog.text
    finally:
        hearing.cancel()
        await asyncio.gather(hearing, return_exceptions=True)
        await feed.aclose()
