"""The synchronous facade: :class:`SyncQueue`, for Django and Flask views, scripts and any code
without an event loop.

It is a thin shell, not a second implementation: each call runs the async
:class:`~caravel.queue.DatabaseQueue`'s own method on an event loop of the queue's own thread
and waits for it, so validation, serialization, SQL and every guarantee are the same code. Two
calls run on the caller's thread instead, through the same preparation and statements: an
insert in the caller's own transaction (``session=``), on the caller's connection (see
:mod:`caravel.store.plans`), and the one-job :meth:`SyncQueue.enqueue`, on a blocking connection
of the store's (:meth:`~caravel.store.protocol.Store.job_insert_blocking`; what that insert does
not settle, such as an idempotent repeat, it hands to the loop). Handing a call to the loop and
waiting for it costs more than the insert itself.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Iterable
from datetime import timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar
from uuid import UUID

from caravel._loop_thread import LoopThread
from caravel.attempts import AttemptRecord
from caravel.batches import batch_jobs
from caravel.chains import chain_steps
from caravel.clock import Clock
from caravel.jobs import (
    DEFAULT_TENANT,
    CancelOutcome,
    DispatchOptions,
    EnqueueResult,
    JobState,
    JobStatus,
)
from caravel.options import QueueOptions
from caravel.preparation import prepare_job, prepare_jobs
from caravel.queue import DatabaseQueue
from caravel.queue.enqueueing import enqueue_results, woken_queues
from caravel.registry import JobRegistry
from caravel.retention import DEFAULT_PRUNE_BATCH, DEFAULT_PRUNE_PAUSE, Retention
from caravel.store.protocol import NewJob, Store
from caravel.store.pruning import PruneBatch
from caravel.workflows import WorkflowResult, step_ids
from caravel.workflows.operations import step_ids_of
from caravel.workflows.preparation import prepare_workflow

if TYPE_CHECKING:
    import sqlalchemy as sa

    from caravel.batches import BatchResult, BatchStatus
    from caravel.cancelling import MatchedJobs
    from caravel.chains import ChainResult, ChainStatus
    from caravel.flow.concurrency import ConcurrencyLimit
    from caravel.flow.rate import RateLimit
    from caravel.store.limit_values import LimitKind
    from caravel.workflows import Workflow, WorkflowStatus

__all__ = ["SyncQueue"]

T = TypeVar("T")


class SyncQueue:
    """A durable queue for synchronous code, with the operations and guarantees of
    :class:`~caravel.DatabaseQueue`.

    Make one per process and share it between threads, as you would a SQLAlchemy engine: it
    keeps its own pooled connections, on an event loop of its own thread that starts with the
    first call. Use it as a context manager, or call :meth:`close`; a queue still open at
    interpreter exit is closed then, so nothing is left pending.
    """

    def __init__(
        self,
        target: str | sa.URL | Store,
        registry: JobRegistry,
        *,
        options: QueueOptions | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._init(DatabaseQueue(target, registry, options=options, clock=clock))

    @classmethod
    def from_queue(cls, queue: DatabaseQueue) -> SyncQueue:
        """The synchronous shell of ``queue``, which must not have been used on another event
        loop yet. Closing the shell closes ``queue``."""
        shell = cls.__new__(cls)
        shell._init(queue)
        return shell

    def _init(self, queue: DatabaseQueue) -> None:
        self.queue = queue
        """The async queue this shells; it lives on the loop :meth:`call` runs on."""
        self._loop = LoopThread("caravel-sync-queue", queue.close)
        self._identity: str | None = None
        # A queue that does more in its enqueue (the testing ImmediateQueue) has it called.
        self._enqueues_itself = type(queue).enqueue is not DatabaseQueue.enqueue

    def call(self, fn: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
        """Run ``fn(*args)``, a coroutine function, on the queue's event loop and return its
        result: how to use an async API of the library (a worker's ``run_once``, the
        inspector) against this queue from synchronous code."""
        return self._loop.call(fn, *args)

    def close(self) -> None:
        """Release the connections and stop the queue's thread. Closing again does nothing."""
        self._loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def check_schema(self) -> None:
        """As :meth:`DatabaseQueue.check_schema <caravel.DatabaseQueue.check_schema>`."""
        self.call(self.queue.check_schema)

    # ----- enqueue -------------------------------------------------------------------------

    def enqueue(
        self, job: object, dispatch: DispatchOptions, *, session: object | None = None
    ) -> EnqueueResult:
        """As :meth:`DatabaseQueue.enqueue <caravel.DatabaseQueue.enqueue>`. ``session`` is a
        SQLAlchemy ``Session`` or ``Connection``, or a psycopg, PyMySQL or ``sqlite3``
        connection, on the queue's own database: the job is inserted in its open transaction, on
        this thread."""
        q = self.queue
        if session is not None:
            (result,) = self._insert_joined(
                session, [prepare_job(q.registry, q.options, job, dispatch, q.clock.now_ms())]
            )
            return result
        if self._enqueues_itself:
            return self._loop.call(q.enqueue, job, dispatch)
        # On this thread, where the store can: handing the call to the loop and waiting for it
        # would cost more than the insert (docs/performance.md).
        loop = self._loop.caller_loop()
        new_job = prepare_job(q.registry, q.options, job, dispatch, q.clock.now_ms())
        inserted = q.store.job_insert_blocking(new_job, loop)
        q.wakeups.notify_threadsafe(loop, woken_queues(inserted))
        (result,) = enqueue_results(inserted)
        return result

    def enqueue_many(
        self, items: Iterable[tuple[object, DispatchOptions]], *, session: object | None = None
    ) -> list[EnqueueResult]:
        """As :meth:`DatabaseQueue.enqueue_many <caravel.DatabaseQueue.enqueue_many>`, with
        ``session`` as for :meth:`enqueue`."""
        items = list(items)
        if session is not None:
            q = self.queue
            return self._insert_joined(
                session, prepare_jobs(q.registry, q.options, items, q.clock.now_ms())
            )
        return self.call(self.queue.enqueue_many, items)

    def _insert_joined(self, session: object, new_jobs: list[NewJob]) -> list[EnqueueResult]:
        if self._identity is None:
            self._identity = self.call(self.queue.store.database_identity)
        loop, hub = self._loop.loop, self.queue.wakeups

        def committed(queues: set[str]) -> None:
            hub.notify_threadsafe(loop, queues)

        inserted = self.queue.store.job_insert_joined_sync(
            session, new_jobs, self._identity, on_commit=committed
        )
        return enqueue_results(inserted)

    # ----- workflows -------------------------------------------------------------------------

    def enqueue_workflow(
        self, workflow: Workflow, *, session: object | None = None
    ) -> WorkflowResult:
        """As :meth:`DatabaseQueue.enqueue_workflow <caravel.DatabaseQueue.enqueue_workflow>`;
        ``session`` as for :meth:`enqueue`."""
        if session is None:
            return self.call(self.queue.enqueue_workflow, workflow)
        q = self.queue
        new = prepare_workflow(q.registry, q.options, workflow, q.clock.now_ms())
        if self._identity is None:
            self._identity = self.call(q.store.database_identity)
        loop, hub = self._loop.loop, q.wakeups

        def committed(queues: set[str]) -> None:
            hub.notify_threadsafe(loop, queues)

        found, created = q.store.workflow_insert_joined_sync(
            session, new, self._identity, on_commit=committed
        )
        if not created:
            ids = self.call(step_ids_of, q.store, found, new.tenant_id)
            return WorkflowResult(found, already_enqueued=True, step_ids=ids)
        return WorkflowResult(found, already_enqueued=False, step_ids=step_ids(new))

    def get_workflow(
        self, workflow_id: UUID | str, tenant_id: str = DEFAULT_TENANT
    ) -> WorkflowStatus | None:
        """As :meth:`DatabaseQueue.get_workflow <caravel.DatabaseQueue.get_workflow>`."""
        return self.call(self.queue.get_workflow, workflow_id, tenant_id)

    def cancel_workflow(self, workflow_id: UUID | str, tenant_id: str = DEFAULT_TENANT) -> int:
        """As :meth:`DatabaseQueue.cancel_workflow <caravel.DatabaseQueue.cancel_workflow>`."""
        return self.call(self.queue.cancel_workflow, workflow_id, tenant_id)

    def signal(
        self,
        workflow_id: UUID | str,
        name: str,
        payload: object = None,
        *,
        tenant_id: str = DEFAULT_TENANT,
    ) -> bool:
        """As :meth:`DatabaseQueue.signal <caravel.DatabaseQueue.signal>`."""
        send = functools.partial(self.queue.signal, tenant_id=tenant_id)
        return self.call(send, workflow_id, name, payload)

    # ----- chains and batches --------------------------------------------------------------

    def enqueue_chain(self, steps: Iterable[tuple[object, DispatchOptions]]) -> ChainResult:
        """As :meth:`DatabaseQueue.enqueue_chain <caravel.DatabaseQueue.enqueue_chain>`."""
        # Read here, on the caller's thread, and no further than the limit.
        return self.call(self.queue.enqueue_chain, chain_steps(steps))

    def get_chain(
        self, chain_id: UUID | str, tenant_id: str = DEFAULT_TENANT
    ) -> ChainStatus | None:
        """As :meth:`DatabaseQueue.get_chain <caravel.DatabaseQueue.get_chain>`."""
        return self.call(self.queue.get_chain, chain_id, tenant_id)

    def enqueue_batch(
        self,
        jobs: Iterable[tuple[object, DispatchOptions]],
        *,
        callback: tuple[object, DispatchOptions] | None = None,
    ) -> BatchResult:
        """As :meth:`DatabaseQueue.enqueue_batch <caravel.DatabaseQueue.enqueue_batch>`."""
        enqueue = functools.partial(self.queue.enqueue_batch, callback=callback)
        return self.call(enqueue, batch_jobs(jobs))

    def get_batch(
        self, batch_id: UUID | str, tenant_id: str = DEFAULT_TENANT
    ) -> BatchStatus | None:
        """As :meth:`DatabaseQueue.get_batch <caravel.DatabaseQueue.get_batch>`."""
        return self.call(self.queue.get_batch, batch_id, tenant_id)

    # ----- status and replay ---------------------------------------------------------------

    def get_status(
        self, job_id: UUID | str, queue: str, tenant_id: str = DEFAULT_TENANT
    ) -> JobStatus | None:
        """As :meth:`DatabaseQueue.get_status <caravel.DatabaseQueue.get_status>`."""
        return self.call(self.queue.get_status, job_id, queue, tenant_id)

    def get_attempts(
        self, job_id: UUID | str, queue: str, tenant_id: str = DEFAULT_TENANT
    ) -> list[AttemptRecord] | None:
        """As :meth:`DatabaseQueue.get_attempts <caravel.DatabaseQueue.get_attempts>`."""
        return self.call(self.queue.get_attempts, job_id, queue, tenant_id)

    def get_payload(
        self, job_id: UUID | str, queue: str, tenant_id: str = DEFAULT_TENANT
    ) -> str | None:
        """As :meth:`DatabaseQueue.get_payload <caravel.DatabaseQueue.get_payload>`."""
        return self.call(self.queue.get_payload, job_id, queue, tenant_id)

    def get_result(self, job_id: UUID | str, queue: str, tenant_id: str = DEFAULT_TENANT) -> Any:
        """As :meth:`DatabaseQueue.get_result <caravel.DatabaseQueue.get_result>`."""
        return self.call(self.queue.get_result, job_id, queue, tenant_id)

    def replay(self, job_id: UUID | str, queue: str, tenant_id: str = DEFAULT_TENANT) -> bool:
        """As :meth:`DatabaseQueue.replay <caravel.DatabaseQueue.replay>`."""
        return self.call(self.queue.replay, job_id, queue, tenant_id)

    def prune(
        self,
        retention: Retention,
        *,
        queue: str | None = None,
        limit: int = DEFAULT_PRUNE_BATCH,
        dry_run: bool = False,
        pause: timedelta = DEFAULT_PRUNE_PAUSE,
    ) -> PruneBatch:
        """As :meth:`DatabaseQueue.prune <caravel.DatabaseQueue.prune>`."""
        prune = functools.partial(
            self.queue.prune, queue=queue, limit=limit, dry_run=dry_run, pause=pause
        )
        return self.call(prune, retention)

    # ----- pausing queues ------------------------------------------------------------------

    def pause_queue(self, queue: str) -> bool:
        """As :meth:`DatabaseQueue.pause_queue <caravel.DatabaseQueue.pause_queue>`."""
        return self.call(self.queue.pause_queue, queue)

    def resume_queue(self, queue: str) -> bool:
        """As :meth:`DatabaseQueue.resume_queue <caravel.DatabaseQueue.resume_queue>`."""
        return self.call(self.queue.resume_queue, queue)

    def set_queue_limit(self, limit: ConcurrencyLimit | RateLimit) -> None:
        """As :meth:`DatabaseQueue.set_queue_limit <caravel.DatabaseQueue.set_queue_limit>`."""
        self.call(self.queue.set_queue_limit, limit)

    def clear_queue_limit(self, queue: str, kind: LimitKind = "all") -> bool:
        """As :meth:`DatabaseQueue.clear_queue_limit
        <caravel.DatabaseQueue.clear_queue_limit>`."""
        return self.call(self.queue.clear_queue_limit, queue, kind)

    def pause_schedule(self, name: str) -> bool:
        """As :meth:`DatabaseQueue.pause_schedule <caravel.DatabaseQueue.pause_schedule>`."""
        return self.call(self.queue.pause_schedule, name)

    def resume_schedule(self, name: str) -> bool:
        """As :meth:`DatabaseQueue.resume_schedule <caravel.DatabaseQueue.resume_schedule>`."""
        return self.call(self.queue.resume_schedule, name)

    # ----- cancel and delete ---------------------------------------------------------------

    def cancel(
        self, job_id: UUID | str, queue: str, tenant_id: str = DEFAULT_TENANT
    ) -> CancelOutcome:
        """As :meth:`DatabaseQueue.cancel <caravel.DatabaseQueue.cancel>`."""
        return self.call(self.queue.cancel, job_id, queue, tenant_id)

    def delete(self, job_id: UUID | str, queue: str, tenant_id: str = DEFAULT_TENANT) -> bool:
        """As :meth:`DatabaseQueue.delete <caravel.DatabaseQueue.delete>`."""
        return self.call(self.queue.delete, job_id, queue, tenant_id)

    def cancel_matching(
        self,
        queue: str,
        *,
        job_type: str | None = None,
        tenant_id: str | None = None,
        states: Iterable[JobState | str] | None = None,
        older_than: timedelta | None = None,
        dry_run: bool = False,
    ) -> MatchedJobs:
        """As :meth:`DatabaseQueue.cancel_matching <caravel.DatabaseQueue.cancel_matching>`."""
        return self.call(
            functools.partial(
                self.queue.cancel_matching,
                job_type=job_type,
                tenant_id=tenant_id,
                states=states,
                older_than=older_than,
                dry_run=dry_run,
            ),
            queue,
        )

    def delete_matching(
        self,
        queue: str,
        *,
        job_type: str | None = None,
        tenant_id: str | None = None,
        states: Iterable[JobState | str] | None = None,
        older_than: timedelta | None = None,
        dry_run: bool = False,
    ) -> MatchedJobs:
        """As :meth:`DatabaseQueue.delete_matching <caravel.DatabaseQueue.delete_matching>`."""
        return self.call(
            functools.partial(
                self.queue.delete_matching,
                job_type=job_type,
                tenant_id=tenant_id,
                states=states,
                older_than=older_than,
                dry_run=dry_run,
            ),
            queue,
        )
