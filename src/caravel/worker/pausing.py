"""Which of the worker's queues are paused: read from the store when the worker starts, again
whenever the store pushes a pause or resume of one of them (PostgreSQL's NOTIFY on its own
channel), and at least once every ``poll_interval`` whatever the store can push (a missed
notification, a listener reconnecting, SQLite and the memory store, which push none).

The fetchers consult the set before every claim and claim nothing from a paused queue, so the
claim statement itself stays as it was. The timing guarantee that follows: a pause stops new
claims once the worker has read it, at most one ``poll_interval`` after it committed (on
PostgreSQL with its listener connected, as soon as the notification arrives, typically within
milliseconds); a claim already on its way may still start its jobs. Jobs already running are
not touched: they finish and are acknowledged as usual. A resume wakes the queue's fetcher at
once when the worker reads it.

The same reads keep the worker's view of its queues' concurrency limits
(:class:`~caravel.flow.following.LimitedQueues`) current: a limit's change is announced on the
same channel, and a queue whose limit changed (removed above all) has its fetcher woken too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence

from caravel.clock import Clock
from caravel.errors import StoreError
from caravel.flow.following import LimitedQueues
from caravel.signals import WakeupHub
from caravel.store.protocol import Store
from caravel.worker.outage import Outage

__all__ = ["PausedQueues"]

logger = logging.getLogger("caravel.worker")


class PausedQueues:
    """The paused set of ``queues``, kept current by :meth:`run`."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        hub: WakeupHub,
        *,
        poll_seconds: float,
        limits: LimitedQueues | None = None,
        listen: bool = True,
        outage: Outage | None = None,
    ) -> None:
        self._store = store
        self._outage = outage
        self._listen = listen
        self._limits = limits
        self._clock = clock
        self._hub = hub
        self._poll_seconds = poll_seconds
        self._queues: frozenset[str] = frozenset()
        self._paused: frozenset[str] = frozenset()
        self._changed = asyncio.Event()

    def __contains__(self, queue: object) -> bool:
        return queue in self._paused

    @property
    def paused(self) -> frozenset[str]:
        """The paused queues, as last read."""
        return self._paused

    async def paused_now(self, queue: str) -> bool:
        """Whether ``queue`` is paused, read from the store now (one step of the worker)."""
        return any(p.queue == queue for p in await self._store.queue_list_paused())

    async def refresh(self, queues: Sequence[str] | None = None) -> frozenset[str]:
        """Read the paused set again (of ``queues`` from now on, when given); wake the fetchers
        of queues resumed since the last read. Returns the paused queues."""
        if queues is not None:
            self._queues = frozenset(queues)
        listed = await self._store.queue_list_paused()
        paused = frozenset(p.queue for p in listed if p.queue in self._queues)
        resumed = self._paused - paused
        for queue in sorted(paused - self._paused):
            logger.info("queue paused; claiming none of its jobs", extra={"queue": queue})
        for queue in sorted(resumed):
            logger.info("queue resumed; claiming its jobs again", extra={"queue": queue})
        self._paused = paused
        if self._limits is not None:
            resumed |= await self._limits.refresh(self._queues)
        if resumed:
            self._hub.notify(resumed)
        return paused

    async def run(self) -> None:
        """Re-read the set on every pushed change, and every poll interval regardless. A read
        the database could not answer is tried again after a pause, within the worker's outage
        window (:mod:`~caravel.worker.outage`); other errors propagate."""
        feed = (
            self._store.queue_changes(sorted(self._queues))
            if self._listen and self._store.supports_listen_notify
            else None
        )
        heard = None if feed is None else asyncio.create_task(self._hear(feed))
        failures = 0  # reads failed in a row by an outage
        try:
            while True:
                try:
                    await self.run_once()
                except StoreError as exc:
                    if self._outage is None:
                        raise
                    await self._outage.wait(exc, failures)
                    failures += 1
                    self._changed.set()  # read again at once, not a poll interval later
                    continue
                # A read that succeeds does not end the outage: only a write does (a read-only
                # server answers reads), so it is left to the claims and acknowledgements.
                failures = 0
        finally:
            if heard is not None:
                heard.cancel()
                await asyncio.gather(heard, return_exceptions=True)

    async def run_once(self) -> frozenset[str]:
        """Wait for a pushed change or the poll interval, then read the set again."""
        if not self._changed.is_set():
            changed = asyncio.ensure_future(self._changed.wait())
            timer = asyncio.ensure_future(self._clock.sleep(self._poll_seconds))
            try:
                await asyncio.wait({changed, timer}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                changed.cancel()
                timer.cancel()
        self._changed.clear()  # a change heard during the read below triggers another
        return await self.refresh()

    async def _hear(self, feed: AsyncIterator[str]) -> None:
        try:
            async for _queue in feed:
                self._changed.set()
        finally:
            aclose = getattr(feed, "aclose", None)
            if aclose is not None:
                await aclose()
