"""``dashboard(url, read_url=...)``: the pages read from the read database and every change
writes to ``url``. Here the two are separate, separately migrated PostgreSQL databases holding
different jobs (no replication), so what a page shows says which one it read; the fault suite
checks the same over a real streaming standby."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from caravel import DatabaseQueue, DispatchOptions
from caravel.errors import StoreError
from caravel.inspector import QueueInspector
from caravel.store.instrumented import InstrumentedStore
from caravel.store.schema import jobs
from caravel.web import Dashboard
from tests.support.dashboard.fixtures import client_for, csrf_token, make_dashboard
from tests.support.dashboard.seed import END, SendEmail, registry
from tests.support.databases import dbapi_connection, pg_database

pytestmark = pytest.mark.postgres

JOBS = jobs.name
_WHERE = {"tenant": "default"}


@pytest.fixture
def primary_url() -> Iterator[str]:
    with pg_database(migrated=True) as url:
        yield url


@pytest.fixture
def read_url() -> Iterator[str]:
    with pg_database(migrated=True) as url:
        yield url


async def _enqueue(url: str, queue: str) -> str:
    async with DatabaseQueue(url, registry) as writer:
        done = await writer.enqueue(
            SendEmail("a@example.com", "welcome"), DispatchOptions(queue=queue)
        )
    return str(done.job_id)


def _copy_row(source: str, target: str, job_id: str) -> None:
    """Copy one job's row as it is, id included, from one database to the other."""
    with dbapi_connection(source) as src, dbapi_connection(target) as dst:
        with (
            src.cursor().copy(
                f"COPY (SELECT * FROM {JOBS} WHERE id = %s) TO STDOUT", (job_id,)
            ) as out,
            dst.cursor().copy(f"COPY {JOBS} FROM STDIN") as into,
        ):
            for chunk in out:
                into.write(chunk)
        dst.commit()


@pytest.fixture
async def app(primary_url: str, read_url: str) -> AsyncIterator[Dashboard]:
    built = make_dashboard(primary_url, read_url=read_url)
    try:
        yield built
    finally:
        await built.close()


@pytest.fixture
async def operator(app: Dashboard) -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(app, "operator") as client:
        yield client


async def test_pages_read_the_read_database(
    primary_url: str, read_url: str, operator: httpx.AsyncClient
) -> None:
    on_primary = await _enqueue(primary_url, "only-primary")
    on_read = await _enqueue(read_url, "only-read")

    overview = (await operator.get("/")).text
    assert 'data-queue="only-read"' in overview
    assert 'data-queue="only-primary"' not in overview
    listing = (await operator.get("/jobs", params={"queue": "only-read"})).text
    assert on_read in listing
    found = await operator.get(f"/jobs/{on_read}", params=_WHERE | {"queue": "only-read"})
    assert found.status_code == 200
    missing = await operator.get(f"/jobs/{on_primary}", params=_WHERE | {"queue": "only-primary"})
    assert missing.status_code == 404


async def test_a_pause_writes_to_the_primary_only(
    primary_url: str, read_url: str, operator: httpx.AsyncClient
) -> None:
    token = await csrf_token(operator, "/queues/emails/pause")
    done = await operator.post(
        "/queues/emails/pause", data={"csrf_token": token, "queue": "emails"}
    )
    assert done.status_code == 303
    async with QueueInspector(primary_url) as primary, QueueInspector(read_url) as read:
        assert [p.queue for p in await primary.paused_queues()] == ["emails"]
        assert await read.paused_queues() == []


async def test_a_cancel_writes_to_the_primary_and_finds_the_job_on_the_read_database(
    primary_url: str, read_url: str, operator: httpx.AsyncClient
) -> None:
    # The same job in both (as a standby would hold it): the page finds it on the read
    # database, the cancel changes the primary's row.
    job_id = await _enqueue(primary_url, "emails")
    _copy_row(primary_url, read_url, job_id)
    path = f"/jobs/{job_id}/cancel"
    token = await csrf_token(operator, f"{path}?queue=emails&tenant=default")
    form = {"csrf_token": token, "queue": "emails", "tenant": "default"}
    done = await operator.post(path, data=form)
    assert done.status_code == 303, done.text
    async with QueueInspector(primary_url) as primary, QueueInspector(read_url) as read:
        cancelled = await primary.get_status(job_id, "emails")
        untouched = await read.get_status(job_id, "emails")
    assert cancelled is not None
    assert cancelled.state.value == "cancelled"
    assert untouched is not None
    assert untouched.state.value == "ready"


async def test_the_read_store_refuses_a_write(app: Dashboard, read_url: str) -> None:
    """Nothing above the store offers the pages a write; below it, the database refuses one."""
    store = app.reader.store
    assert isinstance(store, InstrumentedStore)
    with pytest.raises(StoreError, match="read-only transaction"):
        await store.queue_pause("emails", int(END.timestamp() * 1000))
    async with QueueInspector(read_url) as read:
        assert await read.paused_queues() == []
