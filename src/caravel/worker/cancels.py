"""How a worker learns that a job it runs was cancelled: from the store's pushed notices where it
has them (PostgreSQL: within moments of the cancel's commit), and by looking at the ids of its
running jobs every ``poll_interval`` (one query, and only while jobs run) everywhere, which
also covers a notice lost with the listener's connection. Either way the job's handler is
cancelled through the lease watchdog, as a lost lease cancels it, and its attempt is not
acknowledged: the cancel already fenced the lease, so nothing it reported would count."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from datetime import timedelta
from uuid import UUID

from caravel.clock import Clock
from caravel.errors import StoreError
from caravel.store.protocol import Store
from caravel.worker.watchdog import LeaseWatchdog

__all__ = ["CancelWatch"]

logger = logging.getLogger("caravel.worker")


class CancelWatch:
    """Cancels the handlers of this worker's jobs that an operator cancelled. :meth:`run` polls,
    :meth:`run_once` looks once (what tests drive), :meth:`listen` follows pushed notices."""

    def __init__(
        self, store: Store, watchdog: LeaseWatchdog, clock: Clock, poll_interval: timedelta
    ) -> None:
        self._store = store
        self._watchdog = watchdog
        self._clock = clock
        self._interval = poll_interval.total_seconds()

    async def run_once(self) -> int:
        """Look once at the jobs running now; how many handlers were cancelled."""
        running = list(self._watchdog.current_leases())
        if not running:
            return 0
        cancelled = await self._store.job_cancelled_among(running)
        return sum(self._watchdog.cancel(job_id) for job_id in cancelled)

    async def run(self) -> None:
        while True:
            try:
                await self.run_once()
            except StoreError as exc:
                if not exc.outage:
                    raise
                # The database is away (the fetchers keep the outage's time): look again at
                # the next interval.
            await self._clock.sleep(self._interval)

    def notices(self) -> AsyncIterator[UUID] | None:
        """The store's pushed cancel notices, where it has them."""
        return self._store.cancel_notices()

    async def listen(self, notices: AsyncIterator[UUID]) -> None:
        """Cancel the handler of each job the notices name that this worker runs."""
        async for job_id in notices:
            self._watchdog.cancel(job_id)
