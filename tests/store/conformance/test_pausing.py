"""``queue_pause``, ``queue_resume`` and ``queue_list_paused``: a pause is recorded once (a
second pause changes nothing and keeps the first time), a resume clears it, every store on the
same queue sees the same paused set, the reader reads it, and where the store pushes, listening
workers hear of each change. Pausing is the worker's business: the claim itself ignores it."""

from __future__ import annotations

import pytest

from caravel.errors import StoreError
from caravel.store.protocol import PausedQueue, ReadStore, Store
from tests.store.conformance.builders import QUEUE, T0, claim, insert, new_job
from tests.store.conformance.test_capabilities import WAKEUP_WAIT, Listener, writes_offered


async def test_nothing_is_paused_at_first(store: Store, reader: ReadStore) -> None:
    assert await store.queue_list_paused() == []
    assert await reader.queue_list_paused() == []


async def test_a_pause_is_recorded_once_and_a_resume_clears_it(store: Store) -> None:
    assert await store.queue_pause(QUEUE, T0) is True
    assert await store.queue_list_paused() == [PausedQueue(QUEUE, T0)]
    # Pausing again says it changed nothing, and the first pause's time stays.
    assert await store.queue_pause(QUEUE, T0 + 5) is False
    assert await store.queue_list_paused() == [PausedQueue(QUEUE, T0)]

    assert await store.queue_resume(QUEUE, T0 + 10) is True
    assert await store.queue_list_paused() == []
    assert await store.queue_resume(QUEUE, T0 + 11) is False
    # Paused again after a resume: the new time.
    assert await store.queue_pause(QUEUE, T0 + 20) is True
    assert await store.queue_list_paused() == [PausedQueue(QUEUE, T0 + 20)]


async def test_resuming_a_queue_never_paused_changes_nothing(store: Store) -> None:
    assert await store.queue_resume("never", T0) is False
    assert await store.queue_list_paused() == []


async def test_queues_are_paused_separately_and_listed_by_name(store: Store) -> None:
    for at, name in enumerate(["reports", "emails", "billing"]):
        assert await store.queue_pause(name, T0 + at)
    assert await store.queue_resume("emails", T0 + 9)
    assert await store.queue_list_paused() == [
        PausedQueue("billing", T0 + 2),
        PausedQueue("reports", T0),
    ]


async def test_every_store_on_the_queue_sees_the_pause(
    store: Store, second_store: Store, reader: ReadStore
) -> None:
    assert await store.queue_pause(QUEUE, T0)
    assert await second_store.queue_pause(QUEUE, T0 + 1) is False
    assert await reader.queue_list_paused() == [PausedQueue(QUEUE, T0)]
    assert await second_store.queue_resume(QUEUE, T0 + 2)
    assert await store.queue_list_paused() == []


async def test_a_pause_leaves_the_jobs_and_the_claim_alone(store: Store) -> None:
    """Workers skip a paused queue's claims; the jobs themselves are untouched and still
    enqueued, so a resume finds them as they were."""
    await store.queue_pause(QUEUE, T0)
    await insert(store, [new_job(1), new_job(2)])
    assert len((await claim(store, T0)).claimed) == 2


async def test_the_readers_database_refuses_a_pause(store: Store, reader: ReadStore) -> None:
    if not writes_offered(reader):
        pytest.skip("the reader has no write operations for a database to refuse")
    below = reader.inner  # type: ignore[attr-defined]
    with pytest.raises(StoreError):
        await below.queue_pause(QUEUE, T0)
    assert await store.queue_list_paused() == []


async def test_a_store_without_push_offers_no_queue_changes(store: Store) -> None:
    feed = store.queue_changes([QUEUE])
    if store.supports_listen_notify and feed is not None:
        aclose = getattr(feed, "aclose", None)
        if aclose is not None:
            await aclose()
        pytest.skip("the store pushes queue changes")
    assert feed is None


async def test_pauses_and_resumes_are_pushed_to_listeners(
    store: Store, second_store: Store
) -> None:
    feed = store.queue_changes([QUEUE, "probe"])
    if feed is None:
        pytest.skip("the store does not push queue changes")
    listener = Listener(feed)
    try:
        # Listening once a probe queue's change is heard.
        for n in range(50):
            if n % 2 == 0:
                await second_store.queue_pause("probe", T0 + n)
            else:
                await second_store.queue_resume("probe", T0 + n)
            if await listener.next(within=0.2) == "probe":
                break
        else:
            pytest.fail("the queue-change listener never started")
        await second_store.queue_pause("elsewhere", T0)  # not asked for: not heard
        await second_store.queue_pause(QUEUE, T0)
        assert await listener.next(within=WAKEUP_WAIT) == QUEUE
        await second_store.queue_pause(QUEUE, T0 + 1)  # no change: nothing announced
        await second_store.queue_resume(QUEUE, T0 + 2)
        assert await listener.next(within=WAKEUP_WAIT) == QUEUE
        assert await listener.next(within=0.2) is None
    finally:
        await listener.close()
