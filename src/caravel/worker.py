"""The worker: claim jobs, run their handlers, record outcomes.

``run_once`` takes one step and is what tests and custom schedulers drive. The continuous
``run`` loop is built from the same pieces.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Self

from caravel.errors import LeaseLostError, ValidationError
from caravel.execution import JobRunner, Outcome, ScopeFactory
from caravel.jobs import ClaimedJob
from caravel.queue import DatabaseQueue
from caravel.validation import check_queue_name

__all__ = ["QueueWorker"]

logger = logging.getLogger("caravel.worker")


class QueueWorker:
    """Runs handlers for jobs claimed from a :class:`~caravel.queue.DatabaseQueue`.

    ``scope`` is an optional factory of async context managers; the worker opens a fresh one
    around each job, and the handler reaches its value as ``ctx.scope`` (a database session, a
    unit of work, ...). Synchronous handlers run in a pool of ``threads`` threads.
    """

    def __init__(
        self,
        queue: DatabaseQueue,
        *,
        scope: ScopeFactory | None = None,
        threads: int = 4,
    ) -> None:
        if not isinstance(queue, DatabaseQueue):
            raise ValidationError("queue", "must be a DatabaseQueue")
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValidationError("threads", "must be a positive integer")
        self.queue = queue
        self._threads = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="caravel-job")
        self._runner = JobRunner(queue, scope=scope, threads=self._threads)
        self.lost_acknowledgements = 0

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Release the handler threads (without waiting for abandoned synchronous handlers)."""
        self._threads.shutdown(wait=False, cancel_futures=True)

    async def run_once(self, queue: str) -> bool:
        """Claim at most one job of ``queue``, run it and record its outcome.

        Returns whether a job was claimed, not whether its handler succeeded. Database failures
        while claiming or acknowledging propagate; they are never recorded as job failures.
        """
        check_queue_name(queue)
        claimed = await self.queue.claim(queue)
        if claimed is None:
            return False
        outcome = await self._runner.run(claimed)
        await self.acknowledge(claimed, outcome)
        return True

    async def acknowledge(self, claimed: ClaimedJob, outcome: Outcome) -> None:
        """Persist one outcome. An abandoned job is left alone; a stale lease is counted and
        logged, never raised."""
        fields = {
            "job_id": str(claimed.job_id),
            "queue": claimed.queue,
            "job_type": claimed.job_type,
            "attempt": claimed.attempt,
        }
        if outcome.abandoned is not None:
            logger.warning(
                "job abandoned without acknowledgement",
                extra={**fields, "reason": outcome.abandoned.value},
            )
            return
        try:
            if outcome.failure is None:
                await self.queue.complete(outcome.lease)
                logger.debug("job completed", extra=fields)
                return
            result = await self.queue.fail(outcome.lease, outcome.failure.value)
        except LeaseLostError:
            self.lost_acknowledgements += 1
            logger.warning("job acknowledgement rejected: lease lost", extra=fields)
            return
        logger.info(
            "job failed",
            extra={
                **fields,
                "category": outcome.failure.value,
                "dead_lettered": result.dead_lettered,
            },
        )
