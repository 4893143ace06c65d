"""A workflow enqueued inside the caller's own transaction (``session=``), on every SQL database,
sync and async: every step, edge and wait exists exactly when that transaction commits, and its
ready steps' workers are woken by the commit."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from caravel import IdempotencyConflictError, SyncQueue, Workflow
from caravel.store.urls import async_url, sync_url
from tests.support import Add, make_registry, open_queue

NOTES = sa.table("app_notes", sa.column("body", sa.Text))
TENANT = "tenant-a"


def _graph(key: str | None = "nightly", last: int = 3) -> Workflow:
    wf = Workflow("nightly", tenant_id=TENANT, idempotency_key=key)
    wf.add("first", Add(1))
    wf.add_many("many", [Add(2), Add(3)], after=["first"])
    wf.add("last", Add(last), after=["many"])
    return wf


@pytest.fixture
def engine(db_url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(sync_url(db_url))
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE IF NOT EXISTS app_notes (body TEXT)"))
        conn.execute(sa.text("DELETE FROM app_notes"))
    yield engine
    engine.dispose()


def test_the_workflow_exists_when_the_session_commits(db_url: str, engine: sa.Engine) -> None:
    with SyncQueue(db_url, make_registry()) as queue:
        with Session(engine) as session:
            session.execute(NOTES.insert().values(body="hello"))
            made = queue.enqueue_workflow(_graph(), session=session)
            assert made.already_enqueued is False
            assert queue.get_workflow(made.workflow_id, TENANT) is None  # not before the commit
            session.commit()
        status = queue.get_workflow(made.workflow_id, TENANT)
        assert status is not None
        assert (status.total, len(status.steps)) == (4, 4)
        # The same graph again, in another transaction: the committed workflow.
        with Session(engine) as session:
            again = queue.enqueue_workflow(_graph(), session=session)
            session.commit()
        assert again.already_enqueued is True
        assert again.workflow_id == made.workflow_id
        assert again.step_ids == made.step_ids
        with Session(engine) as session, pytest.raises(IdempotencyConflictError):
            queue.enqueue_workflow(_graph(last=4), session=session)


def test_a_rollback_leaves_no_workflow(db_url: str, engine: sa.Engine) -> None:
    with SyncQueue(db_url, make_registry()) as queue:
        with Session(engine) as session:
            session.execute(NOTES.insert().values(body="hello"))
            made = queue.enqueue_workflow(_graph(), session=session)
            session.rollback()
        assert queue.get_workflow(made.workflow_id, TENANT) is None
        assert queue.queue.wakeups.event("default").is_set() is False
        # The key was never used: the next enqueue under it creates the workflow.
        assert queue.enqueue_workflow(_graph()).already_enqueued is False


async def test_an_async_session_commits_the_workflow_with_the_application_s_rows(
    db_url: str, engine: sa.Engine
) -> None:
    async_engine = create_async_engine(async_url(db_url))
    try:
        async with open_queue(db_url) as queue:
            async with AsyncSession(async_engine) as session:
                await session.execute(NOTES.insert().values(body="hello"))
                made = await queue.enqueue_workflow(_graph(key=None), session=session)
                assert await queue.get_workflow(made.workflow_id, TENANT) is None
                await session.commit()
            status = await queue.get_workflow(made.workflow_id, TENANT)
            assert status is not None
            assert status.total == 4
    finally:
        await async_engine.dispose()
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(NOTES)).scalar() == 1
