"""One pending per key through the public calls on every database: enqueue and enqueue_many
with keep and replace (the due time capped by max_debounce on the queue's clock), the caller's
session, the sync facade, status, the conflict error; and the outbox, which refuses a key."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from caravel import DispatchOptions, PendingKeyConflictError, SyncQueue
from caravel.store.urls import sync_url
from caravel.testing import ManualClock
from tests.support import Add, Report, dispatch, make_registry, open_queue
from tests.support.databases import dbapi_connection

KEY = "reindex:user-42"


def keep() -> DispatchOptions:
    return dispatch(pending_key=KEY)


def replace(**extra: object) -> DispatchOptions:
    return dispatch(pending_key=KEY, on_pending="replace", **extra)


async def test_keep_returns_the_pending_job_until_it_is_claimed(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        first = await queue.enqueue(Add(1), keep())
        again = await queue.enqueue(Add(2), keep())
        assert not first.already_enqueued
        assert (again.job_id, again.already_enqueued, again.replaced) == (first.job_id, True, False)
        status = await queue.get_status(first.job_id, "default", "tenant-a")
        assert status is not None
        assert status.pending_key == KEY
        assert (
            await queue.get_payload(first.job_id, "default", "tenant-a") == '{"amount":1,"note":""}'
        )
        with pytest.raises(PendingKeyConflictError) as caught:
            await queue.enqueue(Report(report_id="r"), keep())
        assert caught.value.job_id == first.job_id


async def test_replace_debounces_up_to_max_debounce(db_url: str) -> None:
    clock = ManualClock()
    async with open_queue(db_url, clock=clock) as queue:
        options = replace(max_debounce=timedelta(seconds=30))
        first = await queue.enqueue(Add(0), options)
        created = clock.now()
        for n in range(1, 6):  # a call every 10 s, each asking for "in 10 s"
            await clock.advance(timedelta(seconds=10))
            later = replace(
                max_debounce=timedelta(seconds=30), not_before=clock.now() + timedelta(seconds=10)
            )
            result = await queue.enqueue(Add(n), later)
            assert (result.job_id, result.already_enqueued, result.replaced) == (
                first.job_id,
                True,
                True,
            )
        status = await queue.get_status(first.job_id, "default", "tenant-a")
        assert status is not None
        assert status.due_at == created + timedelta(seconds=30)
        assert (
            await queue.get_payload(first.job_id, "default", "tenant-a") == '{"amount":5,"note":""}'
        )


async def test_enqueue_many_settles_a_key_twice_in_order(db_url: str) -> None:
    async with open_queue(db_url) as queue:
        items = [(Add(n), dispatch(f"plain-{n}")) for n in range(12)]
        items[3] = (Add(100), replace())
        items[9] = (Add(101), replace())
        results = await queue.enqueue_many(items)
        assert results[9].job_id == results[3].job_id
        assert (results[3].already_enqueued, results[9].replaced) == (False, True)
        assert len({r.job_id for r in results}) == 11
        payload = await queue.get_payload(results[3].job_id, "default", "tenant-a")
        assert payload == '{"amount":101,"note":""}'


def test_the_sync_facade_and_the_callers_session_settle_keys(db_url: str) -> None:
    with SyncQueue(db_url, make_registry()) as queue:
        direct = queue.enqueue(Add(1), keep())
        engine = sa.create_engine(sync_url(db_url))
        try:
            with Session(engine) as session:
                joined = queue.enqueue_many(
                    [(Add(2), keep()), (Add(3), replace()), (Add(4), dispatch(pending_key="x"))],
                    session=session,
                )
                session.commit()
            with Session(engine) as session:
                with pytest.raises(PendingKeyConflictError):
                    queue.enqueue(Report(report_id="r"), replace(), session=session)
                session.rollback()
        finally:
            engine.dispose()
        assert [r.job_id for r in joined[:2]] == [direct.job_id, direct.job_id]
        assert [(r.already_enqueued, r.replaced) for r in joined] == [
            (True, False),
            (True, True),
            (False, False),
        ]
        payload = queue.get_payload(direct.job_id, "default", "tenant-a")
        assert payload == '{"amount":3,"note":""}'


def test_a_dbapi_connection_settles_keys_in_its_transaction(db_url: str) -> None:
    with SyncQueue(db_url, make_registry()) as queue:
        raw: Any = dbapi_connection(db_url)
        try:
            first = queue.enqueue(Add(1), keep(), session=raw)
            kept = queue.enqueue(Add(2), keep(), session=raw)
            replaced = queue.enqueue(Add(3), replace(), session=raw)
            raw.commit()
        finally:
            raw.close()
        assert kept.job_id == replaced.job_id == first.job_id
        assert (kept.replaced, replaced.replaced) == (False, True)
        payload = queue.get_payload(first.job_id, "default", "tenant-a")
        assert payload == '{"amount":3,"note":""}'
