"""The inspector and the dashboard read from a real streaming standby and never write there.

A private primary and its synchronous standby (:mod:`tests.faults.replication`). The standby
refuses every write (it is in recovery), so an inspector or a dashboard page that wrote
anything through its read connection would fail; every page answering proves none does. The
dashboard's changes (a pause, a cancel) go to the primary and reach the standby's pages once it
has replayed them. Served by a real uvicorn, over real HTTP."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator

import httpx
import psycopg
import pytest

from caravel import DatabaseQueue, DispatchOptions, migrate
from caravel.errors import StoreError
from caravel.inspector import QueueInspector
from caravel.jobs import JobState
from caravel.web import dashboard
from tests.faults.pgserver import PrivateCluster
from tests.faults.replication import ReplicatedPair, pair_for_test
from tests.support.dashboard.seed import SendEmail, registry
from tests.support.dashboard.server import serving
from tests.support.processes import run_cli, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.serial, pytest.mark.postgres]

CSRF_INPUT = re.compile(r'name="csrf_token" value="([^"]+)"')
TENANT = "default"


@pytest.fixture
def pair() -> Iterator[ReplicatedPair]:
    with pair_for_test(synchronous=True) as made:
        yield made


def _on_standby(pair: ReplicatedPair, check: str) -> bool:
    """Whether the standby's copy of the queue answers ``check`` (a boolean query) with true:
    a synchronous standby has flushed every commit, but replays it a moment later."""
    try:
        with psycopg.connect(pair.database_url(pair.standby, "queue"), autocommit=True) as conn:
            row = conn.execute(check).fetchone()
    except psycopg.errors.UndefinedTable:  # the migration not replayed yet either
        return False
    return bool(row and row[0])


def _sessions(cluster: PrivateCluster) -> int:
    """Client sessions open on the queue database of ``cluster``, other than this query's."""
    rows = cluster.admin_query(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = 'queue' "
        "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
    )
    return int(rows[0][0])


async def _enqueue(url: str, queue: str, n: int) -> list[str]:
    async with DatabaseQueue(url, registry) as writer:
        done = [
            await writer.enqueue(SendEmail(f"{i}@x.example", "hi"), DispatchOptions(queue=queue))
            for i in range(n)
        ]
    return [str(one.job_id) for one in done]


def _token(client: httpx.Client, path: str) -> str:
    page = client.get(path)
    assert page.status_code == 200, page.text
    found = CSRF_INPUT.search(page.text)
    assert found is not None
    return found.group(1)


def test_the_inspector_and_the_dashboard_read_the_standby_and_write_the_primary(
    pair: ReplicatedPair,
) -> None:
    primary_url = pair.create_database("queue")
    standby_url = pair.database_url(pair.standby, "queue")
    migrate.upgrade(primary_url)
    ids = asyncio.run(_enqueue(primary_url, "emails", 3))
    jobs = "SELECT count(*) = 3 FROM caravel_jobs WHERE queue = 'emails'"
    wait_until(lambda: _on_standby(pair, jobs), what="the jobs on the standby")

    # The standby refuses writes, from any connection.
    async def write_there() -> None:
        async with DatabaseQueue(standby_url, registry) as queue:
            await queue.pause_queue("emails")

    with pytest.raises(StoreError, match="read-only transaction"):
        asyncio.run(write_there())

    # The inspector opens, checks the schema and reads there: nothing it does writes.
    async def inspect() -> None:
        async with QueueInspector(standby_url) as reader:
            await reader.check_schema()
            counts = {c.queue: c for c in await reader.queue_counts()}
            assert counts["emails"].ready == 3
            status = await reader.get_status(ids[0], "emails", TENANT)
            assert status is not None
            assert status.state is JobState.READY

    asyncio.run(inspect())

    # A read URL naming both servers, with libpq's prefer-standby, reads the standby too.
    both = pair.url("queue").replace("read-write", "prefer-standby")

    async def inspect_either() -> None:
        async with QueueInspector(both) as reader:
            before = _sessions(pair.standby)
            assert {c.queue for c in await reader.queue_counts()} == {"emails"}
            assert _sessions(pair.standby) == before + 1  # its pool keeps the session
            assert _sessions(pair.primary) == 0

    asyncio.run(inspect_either())
    # So do the command line's reads, pointed at the standby.
    status = run_cli("status", "--url", standby_url, "--json")
    assert status.returncode == 0, status.stderr
    assert '"emails"' in status.stdout
    scaling = run_cli("metrics", "--url", standby_url)
    assert scaling.returncode == 0, scaling.stderr
    assert '"ready": 3' in scaling.stdout

    app = dashboard(primary_url, read_url=standby_url)
    with serving(app) as base, httpx.Client(base_url=base, timeout=30) as client:
        for path in (
            "/",
            "/jobs?queue=emails",
            f"/jobs/{ids[0]}?queue=emails&tenant={TENANT}",
            "/dead-letters",
            "/workers",
            "/schedules",
            "/batches",
            "/queues/emails/limits",
            "/metrics",
        ):
            page = client.get(path)
            assert page.status_code == 200, (path, page.text)
        assert 'data-queue="emails"' in client.get("/").text
        # The pages' connections are the standby's; none of them went to the primary.
        assert _sessions(pair.standby) > 0
        assert _sessions(pair.primary) == 0

        # A pause is written to the primary; the standby's overview shows it once replayed.
        token = _token(client, "/queues/emails/pause")
        done = client.post("/queues/emails/pause", data={"csrf_token": token, "queue": "emails"})
        assert done.status_code == 303, done.text
        paused = "SELECT paused_at IS NOT NULL FROM caravel_queues WHERE queue = 'emails'"
        wait_until(lambda: _on_standby(pair, paused), what="the pause on the standby")
        assert "paused since" in client.get("/").text

        # A cancel: the page finds the job on the standby, the primary cancels it.
        path = f"/jobs/{ids[1]}/cancel"
        token = _token(client, f"{path}?queue=emails&tenant={TENANT}")
        form = {"csrf_token": token, "queue": "emails", "tenant": TENANT}
        done = client.post(path, data=form)
        assert done.status_code == 303, done.text
        cancelled = f"SELECT state = 'cancelled' FROM caravel_jobs WHERE id = '{ids[1]}'"
        wait_until(lambda: _on_standby(pair, cancelled), what="the cancel on the standby")
        shown = client.get(f"/jobs/{ids[1]}?queue=emails&tenant={TENANT}")
        assert "cancelled" in shown.text.lower()

    async def on_primary() -> None:
        async with QueueInspector(primary_url) as reader:
            assert [p.queue for p in await reader.paused_queues()] == ["emails"]
            status = await reader.get_status(ids[1], "emails", TENANT)
            assert status is not None
            assert status.state is JobState.CANCELLED

    asyncio.run(on_primary())
