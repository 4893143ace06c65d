"""Wake-ups from other processes: where the store can push enqueues (PostgreSQL's LISTEN, the
sockets beside a SQLite file), a listener feeds the queue names it hears into the worker's
in-process hub, which the fetchers wait on. Without push (SQLite where the platform has no Unix
datagram sockets) the fetchers poll, and enqueues in the same process still signal the hub
directly."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from caravel.signals import WakeupHub
from caravel.store.protocol import Store

__all__ = ["WakeupListener"]


class WakeupListener:
    """Relays the store's pushed wake-ups for ``queues`` into ``hub``."""

    def __init__(self, feed: AsyncIterator[str], hub: WakeupHub) -> None:
        self._feed = feed
        self._hub = hub

    @classmethod
    def for_store(
        cls, store: Store, queues: Sequence[str], hub: WakeupHub
    ) -> WakeupListener | None:
        """A listener when ``store`` can push wake-ups, else ``None``."""
        if not store.supports_listen_notify:
            return None
        feed = store.wakeups(queues)
        return None if feed is None else cls(feed, hub)

    async def run(self) -> None:
        async for queue in self._feed:
            self._hub.notify((queue,))

    async def run_once(self) -> str:
        """Wait for one wake-up and pass it on; returns its queue."""
        queue = await anext(self._feed)
        self._hub.notify((queue,))
        return queue
