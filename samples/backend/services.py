"""What one running application holds: its settings, database engines, the queue, the sign-in
window and, when ``CARAVEL__RUN_WORKER`` is true, a supervised in-process worker.

Opening creates connection pools but connects to nothing and creates nothing; the schema must
have been applied with ``migrate`` beforehand.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta

from caravel_samples.backend.db import create_engine, create_read_only_engine
from caravel_samples.backend.jobs import QUEUE, job_scope, registry
from caravel_samples.backend.login_limit import FixedWindow
from caravel_samples.backend.settings import Settings
from sqlalchemy.ext.asyncio import AsyncEngine

from caravel import (
    Clock,
    DatabaseQueue,
    QueueInspector,
    QueueOptions,
    QueueWorker,
    WorkerOptions,
)

logger = logging.getLogger("caravel_samples.backend")

#: Readiness gives up after this long.
READY_TIMEOUT_SECONDS = 5.0
#: Pause before a faulted worker (database down, schema missing) is started again.
WORKER_RESTART_SECONDS = 5.0


class Services:
    def __init__(self, settings: Settings, *, clock: Clock | None = None) -> None:
        self.settings = settings
        self.engine: AsyncEngine = create_engine(settings)
        self.probe_engine: AsyncEngine = create_read_only_engine(
            settings, timeout_seconds=READY_TIMEOUT_SECONDS
        )
        options = QueueOptions(lease_duration=timedelta(seconds=settings.worker.lease_seconds))
        self.queue = DatabaseQueue(settings.database_url, registry, options=options, clock=clock)
        #: Read-only monitoring (``GET /api/jobs``) reads through its own read-only connections.
        self.inspector = QueueInspector(settings.database_url, clock=self.queue.clock)
        self.login_window = FixedWindow(
            settings.limits.login_permit_limit, settings.limits.login_window_seconds
        )
        self.session_lifetime = timedelta(hours=settings.session_hours)
        self._worker: QueueWorker | None = None
        self._worker_task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    def new_worker(self, *, concurrency: int | None = None) -> QueueWorker:
        """A worker over this application's queue whose jobs get a fresh connection each."""
        options = WorkerOptions(concurrency=concurrency or self.settings.worker.concurrency)
        return QueueWorker(self.queue, options=options, scope=job_scope(self.engine))

    def start_worker(self) -> None:
        """Run the counter worker in the background until :meth:`close`."""
        if self._worker_task is None:
            self._worker_task = asyncio.create_task(self._supervise(), name="backend-worker")

    async def _supervise(self) -> None:
        while not self._stopping.is_set():
            worker = self.new_worker()
            self._worker = worker
            try:
                await worker.run(QUEUE)
            except Exception as exc:  # a database failure or an unmigrated schema, usually
                logger.error(
                    "counter worker stopped (%s); restarting in %.0f s",
                    type(exc).__name__,
                    WORKER_RESTART_SECONDS,
                )
            finally:
                self._worker = None
                await worker.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), WORKER_RESTART_SECONDS)

    async def close(self) -> None:
        """Stop the worker (in-flight jobs get its shutdown grace), then release every
        connection."""
        self._stopping.set()
        if self._worker is not None:
            self._worker.stop()
        if self._worker_task is not None:
            await asyncio.gather(self._worker_task, return_exceptions=True)
        await self.queue.close()
        await self.inspector.close()
        await self.engine.dispose()
        await self.probe_engine.dispose()
