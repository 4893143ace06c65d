"""Tags through the public calls on every database: enqueue, enqueue_many, the caller's session,
the sync facade, status and the inspector's tag filter; and the outbox, which refuses them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from caravel import SyncQueue, ValidationError
from caravel.store.urls import sync_url
from tests.support import Add, dispatch, inspector_of, make_registry, open_queue

TAGS = ("billing", "customer:42")


async def test_enqueued_tags_are_on_the_status_and_filter_the_listing(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        one = await queue.enqueue(Add(1), dispatch(tags=TAGS))
        batch = await queue.enqueue_many(
            [(Add(n), dispatch(tags=("batch", f"n:{n}"))) for n in range(20)]
        )
        plain = await queue.enqueue(Add(2), dispatch())
        status = await queue.get_status(one.job_id, "default", "tenant-a")
        assert status is not None
        assert status.tags == TAGS
        untagged = await queue.get_status(plain.job_id, "default", "tenant-a")
        assert untagged is not None
        assert untagged.tags == ()

        reader = inspector_of(queue)
        assert [s.job_id for s in await reader.list_jobs(tag="customer:42")] == [one.job_id]
        in_batch = await reader.list_jobs(tag="batch", limit=100)
        assert {s.job_id for s in in_batch} == {r.job_id for r in batch}
        assert [s.job_id for s in await reader.list_jobs(tag="n:7")] == [batch[7].job_id]
        assert await reader.list_jobs(tag="billing", queue="other") == []
        with pytest.raises(ValidationError) as caught:
            await reader.list_jobs(tag="Billing")
        assert caught.value.field == "tag"


async def test_an_idempotent_repeat_with_other_tags_is_the_original_job(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        first = await queue.enqueue(Add(1), dispatch("order-1", tags=("billing",)))
        again = await queue.enqueue(Add(1), dispatch("order-1", tags=("refund", "urgent")))
        assert (again.job_id, again.already_enqueued) == (first.job_id, True)
        status = await queue.get_status(first.job_id, "default", "tenant-a")
        assert status is not None
        assert status.tags == ("billing",)
        assert await inspector_of(queue).list_jobs(tag="refund") == []


@pytest.fixture
def sync_queue(db_url: str) -> Iterator[SyncQueue]:
    with SyncQueue(db_url, make_registry()) as queue:
        yield queue


def test_the_sync_facade_and_the_callers_session_store_tags(
    db_url: str, sync_queue: SyncQueue
) -> None:
    direct = sync_queue.enqueue(Add(1), dispatch(tags=("sync",)))
    engine = sa.create_engine(sync_url(db_url))
    try:
        with Session(engine) as session:
            joined = sync_queue.enqueue_many(
                [(Add(n), dispatch(tags=("joined", f"n:{n}"))) for n in range(3)], session=session
            )
            session.commit()
    finally:
        engine.dispose()
    found = sync_queue.get_status(direct.job_id, "default", "tenant-a")
    assert found is not None
    assert found.tags == ("sync",)
    for n, result in enumerate(joined):
        status = sync_queue.get_status(result.job_id, "default", "tenant-a")
        assert status is not None
        assert status.tags == ("joined", f"n:{n}")
