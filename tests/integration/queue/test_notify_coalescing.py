"""How many NOTIFYs enqueues send on PostgreSQL, counted by a real LISTEN connection: one per
queue and transaction for a bulk enqueue, one per window for a stream of one-job enqueues (the
window timed on a manual clock), none with wake-ups off; a job is never left unannounced."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

import psycopg
import pytest
from sqlalchemy.engine import make_url

from caravel.store.postgresql.notifications import CHANNEL, Announcer
from caravel.testing import ManualClock
from tests.support import Add, dispatch, open_queue, until

pytestmark = pytest.mark.postgres

#: Sent after the enqueues under test: notifications reach a listener in commit order, so once
#: this one is heard, every NOTIFY committed before it has been heard too.
_MARK = "caravel-test-mark"


def _dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


class _Heard:
    """Payloads a LISTEN connection of its own has received on the jobs channel."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.payloads: list[str] = []

    def of(self, queue: str) -> int:
        return self.payloads.count(queue)

    async def settled(self) -> None:
        """Return once every NOTIFY committed so far has been heard."""
        marks = self.payloads.count(_MARK)
        async with await psycopg.AsyncConnection.connect(_dsn(self.url), autocommit=True) as conn:
            await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, _MARK))
        await until(lambda: self.payloads.count(_MARK) > marks, what="the marker NOTIFY")


@asynccontextmanager
async def _listening(url: str) -> AsyncIterator[_Heard]:
    heard = _Heard(url)
    async with await psycopg.AsyncConnection.connect(_dsn(url), autocommit=True) as conn:
        await conn.execute(f"LISTEN {CHANNEL}")

        async def collect() -> None:
            async for note in conn.notifies():
                heard.payloads.append(note.payload)

        task = asyncio.create_task(collect())
        try:
            yield heard
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def test_a_bulk_enqueue_sends_one_notify_per_queue(pg_url: str) -> None:
    """1,000 jobs in one call (one transaction) wake each of their queues once, with or
    without a send-side window."""
    for window in (0.0, 0.005):
        async with open_queue(pg_url) as queue, _listening(pg_url) as heard:
            queue.store.inner._announcer.cooldown = window
            await queue.enqueue_many((Add(n), dispatch(queue="bulk")) for n in range(1000))
            await queue.enqueue_many(
                [(Add(1), dispatch(queue="a")), (Add(2), dispatch(queue="b"))] * 300
            )
            await queue.store.close()  # a trailing wake-up still waiting would go out now
            await heard.settled()
            assert (heard.of("bulk"), heard.of("a"), heard.of("b")) == (1, 1, 1), window


async def test_without_a_window_every_enqueue_transaction_notifies(pg_url: str) -> None:
    async with open_queue(pg_url) as queue, _listening(pg_url) as heard:
        queue.store.inner._announcer.cooldown = 0.0
        for n in range(20):
            await queue.enqueue(Add(n), dispatch(queue="one"))
        await heard.settled()
        assert heard.of("one") == 20
        assert not queue.store.inner._announcer._trailing  # nothing left for later


async def test_one_job_enqueues_within_the_window_share_a_leading_and_a_trailing_notify(
    pg_url: str,
) -> None:
    """Timed on a manual clock: the first enqueue of the window carries its NOTIFY, the next 49
    none, and the trailing wake-up follows once the window has passed after the last commit, so
    the last job is announced; then the next enqueue leads again."""
    clock = ManualClock()
    async with open_queue(pg_url) as queue, _listening(pg_url) as heard:
        store = queue.store.inner
        store._announcer = Announcer(store.engine, cooldown=0.05, clock=clock)
        for n in range(50):
            await queue.enqueue(Add(n), dispatch(queue="one"))
        await heard.settled()
        assert heard.of("one") == 1
        await clock.advance(timedelta(milliseconds=30))
        await queue.enqueue(Add(50), dispatch(queue="one"))  # pushes the trailing one back
        await clock.advance(timedelta(milliseconds=30))
        await heard.settled()
        assert heard.of("one") == 1  # 60 ms after the first, but 30 ms after the last commit
        await clock.advance(timedelta(milliseconds=30))
        await until(lambda: heard.of("one") == 2, what="the trailing NOTIFY")
        await heard.settled()
        assert heard.of("one") == 2
        await clock.advance(timedelta(milliseconds=100))
        await queue.enqueue(Add(51), dispatch(queue="one"))
        await heard.settled()
        assert heard.of("one") == 3
        assert not store._announcer._trailing


async def test_with_wakeups_off_enqueues_send_no_notify(pg_url: str) -> None:
    off = str(make_url(pg_url).update_query_dict({"wakeups": "off"}))
    async with open_queue(off) as queue, _listening(pg_url) as heard:
        assert queue.store.supports_listen_notify is False
        assert queue.store.wakeups(["one"]) is None
        assert queue.store.cancel_notices() is None
        await queue.enqueue(Add(0), dispatch(queue="one"))
        await queue.enqueue_many((Add(n), dispatch(queue="one")) for n in range(100))
        await queue.store.close()
        await heard.settled()
        assert heard.of("one") == 0
