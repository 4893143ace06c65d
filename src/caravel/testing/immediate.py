"""Immediate mode: a queue whose ``enqueue`` runs the job before it returns.

The job is saved as any enqueue saves it (the same validation, serialization and idempotency),
then claimed and run by a real :class:`~caravel.QueueWorker` in the caller: the handler gets the
job decoded from its stored JSON and a real context, and the outcome is recorded as a worker
records it (completed, a retry with backoff, or a dead letter). Tests of code that enqueues see
the handler's effects at once, and still catch what production would (a payload that does not
survive its JSON, a handler that fails).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal
from uuid import UUID

from caravel.batches import BatchResult, batch_jobs
from caravel.chains import ChainResult, chain_steps
from caravel.clock import Clock
from caravel.errors import ValidationError
from caravel.jobs import DEFAULT_TENANT, DispatchOptions, EnqueueResult
from caravel.options import QueueOptions, WorkerOptions
from caravel.queue import DatabaseQueue
from caravel.registry import JobRegistry
from caravel.testing.runs import JobRun, job_run
from caravel.worker.service import QueueWorker
from caravel.workflows import Workflow, WorkflowResult

if TYPE_CHECKING:
    import sqlalchemy as sa

    from caravel.store.protocol import Store

__all__ = ["ImmediateQueue"]

Failures = Literal["raise", "record"]

#: Handler threads: a synchronous handler that enqueues (through a SyncQueue) runs the new job
#: while its own thread is still busy, so nesting needs more than one.
_THREADS = 4


class ImmediateQueue(DatabaseQueue):
    """A :class:`~caravel.DatabaseQueue` whose ``enqueue``, ``enqueue_many`` and ``replay`` run
    the jobs due in the queues they touched before returning, jobs those handlers enqueue
    included (they run inside the handler that enqueued them, as in Celery's eager mode).

    ``failures="raise"`` (the default) records a failed attempt, then raises the handler's
    exception out of the enqueue (a ``SystemExit`` is only recorded, as ``HandlerExited``);
    ``"record"`` only records it, as a worker would: a retry is
    scheduled after its backoff, or the job becomes a dead letter. A job delayed with
    ``not_before`` is saved and waits: :func:`~caravel.testing.drain` with ``advance=True``
    runs it. Every run is appended to :attr:`runs`. ``target`` defaults to the per-process
    memory store; any migrated database URL works too. Wrap it in ``SyncQueue.from_queue`` for
    synchronous code.
    """

    def __init__(
        self,
        registry: JobRegistry,
        *,
        target: str | sa.URL | Store = "memory://",
        failures: Failures = "raise",
        clock: Clock | None = None,
        options: QueueOptions | None = None,
    ) -> None:
        if failures not in ("raise", "record"):
            raise ValidationError("failures", "must be 'raise' or 'record'")
        super().__init__(target, registry, options=options, clock=clock)
        self.failures: Failures = failures
        #: Every attempt this queue ran, in order.
        self.runs: list[JobRun] = []
        self._worker: QueueWorker | None = None

    async def close(self) -> None:
        """Stop the worker that runs the jobs, then release the connections."""
        worker, self._worker = self._worker, None
        if worker is not None:
            await worker.close()
        await super().close()

    async def enqueue(
        self, job: object, dispatch: DispatchOptions, *, session: object | None = None
    ) -> EnqueueResult:
        """Save ``job`` as :meth:`DatabaseQueue.enqueue` does, then run what is due in its
        queue. With ``session`` the job joins the caller's transaction and does not exist until
        that commits, so this call cannot run it: :func:`~caravel.testing.drain` does."""
        result = await super().enqueue(job, dispatch, session=session)
        # A replaced pending job may have become due now: it runs too.
        if session is None and (not result.already_enqueued or result.replaced):
            await self._run_due({dispatch.queue})
        return result

    async def enqueue_many(
        self, items: Iterable[tuple[object, DispatchOptions]], *, session: object | None = None
    ) -> list[EnqueueResult]:
        """Save the jobs in one transaction, as :meth:`DatabaseQueue.enqueue_many` does, then
        run what is due in their queues (``session`` as for :meth:`enqueue`)."""
        items = list(items)
        results = await super().enqueue_many(items, session=session)
        if session is None:
            pairs = zip(items, results, strict=True)
            await self._run_due(
                {d.queue for (_, d), r in pairs if not r.already_enqueued or r.replaced}
            )
        return results

    async def replay(self, job_id: UUID | str, queue: str, tenant_id: str = DEFAULT_TENANT) -> bool:
        """Replay a dead letter as :meth:`DatabaseQueue.replay` does, then run it (and, for a
        chain's step, the steps it releases)."""
        replayed = await super().replay(job_id, queue, tenant_id)
        if replayed:
            # Every queue: a replayed chain step releases the next one, wherever it is.
            counts = await self.store.queue_counts(None, self.clock.now_ms())
            await self._run_due({queue} | {c.queue for c in counts})
        return replayed

    async def enqueue_chain(self, steps: Iterable[tuple[object, DispatchOptions]]) -> ChainResult:
        """Save the chain as :meth:`DatabaseQueue.enqueue_chain` does, then run its steps as
        each is released (a step that fails stops it, as on a worker)."""
        steps = chain_steps(steps)
        result = await super().enqueue_chain(steps)
        if not result.already_enqueued:
            await self._run_due({dispatch.queue for _, dispatch in steps})
        return result

    async def enqueue_batch(
        self,
        jobs: Iterable[tuple[object, DispatchOptions]],
        *,
        callback: tuple[object, DispatchOptions] | None = None,
    ) -> BatchResult:
        """Save the batch as :meth:`DatabaseQueue.enqueue_batch` does, then run its jobs and,
        once they have all finished, its callback."""
        jobs = batch_jobs(jobs)
        result = await super().enqueue_batch(jobs, callback=callback)
        queues = {dispatch.queue for _, dispatch in jobs}
        if callback is not None:
            queues.add(callback[1].queue)
        await self._run_due(queues)
        return result

    async def enqueue_workflow(
        self, workflow: Workflow, *, session: object | None = None
    ) -> WorkflowResult:
        """Save the workflow as :meth:`DatabaseQueue.enqueue_workflow` does, then run its steps
        as each is released (a step waiting for a signal or a timer stays waiting: a
        :meth:`signal` runs it, or ``drain(advance=True)`` once its time comes)."""
        result = await super().enqueue_workflow(workflow, session=session)
        if not result.already_enqueued:
            await self._run_due({d.queue for step in workflow.steps for _, d in step.jobs})
        return result

    async def signal(
        self,
        workflow_id: UUID | str,
        name: str,
        payload: object = None,
        *,
        tenant_id: str = DEFAULT_TENANT,
    ) -> bool:
        """Signal the workflow as :meth:`DatabaseQueue.signal` does, then run what it released."""
        sent = await super().signal(workflow_id, name, payload, tenant_id=tenant_id)
        if sent:
            counts = await self.store.queue_counts(None, self.clock.now_ms())
            await self._run_due({c.queue for c in counts})
        return sent

    async def _run_due(self, queues: set[str]) -> None:
        if self._worker is None:
            self._worker = QueueWorker(self, options=WorkerOptions(concurrency=_THREADS))
        worker = self._worker
        error: Exception | None = None
        ran = True
        # Passes until one runs nothing: a job that ran may have released another (a chain's
        # next step, a batch's callback) in a queue already passed.
        while ran:
            ran = False
            for name in sorted(queues):
                while (step := await worker.step(name)) is not None:
                    ran = True
                    self.runs.append(job_run(step))
                    failed = None if step.outcome is None else step.outcome.error
                    # A handler's SystemExit is recorded (HandlerExited), never raised here:
                    # it would end the caller's event loop, or a SyncQueue's thread.
                    if error is None and isinstance(failed, Exception):
                        error = failed
        if error is not None and self.failures == "raise":
            raise error
