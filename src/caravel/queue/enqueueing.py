"""Every way jobs get into the queue: one job, many, already prepared ones (the outbox relay's),
in the caller's own session, a chain, a batch. Each is prepared first (validated and serialized,
so a bad job never reaches the database), inserted, and followed by the wake-up of this
process's workers for the queues that got jobs: at once, or when the caller's transaction
commits.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator, Sequence
from uuid import UUID

from caravel.batches import BatchResult, prepare_batch
from caravel.chains import ChainResult, prepare_chain
from caravel.clock import Clock
from caravel.jobs import DispatchOptions, EnqueueResult
from caravel.options import QueueOptions
from caravel.preparation import prepare_job, prepare_jobs
from caravel.registry import JobRegistry
from caravel.signals import WakeupHub
from caravel.store.protocol import AllInserted, InsertResult, NewJob, Store
from caravel.store.workflows.records import NewWorkflow
from caravel.workflows import Workflow, WorkflowResult, prepare_workflow, step_ids
from caravel.workflows.operations import step_ids_of

__all__ = [
    "PREPARE_CHUNK",
    "Enqueuer",
    "enqueue_results",
    "woken_queues",
]

#: ``enqueue_many`` prepares larger batches in chunks of this many jobs (see there).
PREPARE_CHUNK = 250


class Enqueuer:
    """The insert paths of a :class:`~caravel.DatabaseQueue`, which documents each of them."""

    def __init__(
        self,
        store: Store,
        registry: JobRegistry,
        options: QueueOptions,
        clock: Clock,
        wakeups: WakeupHub,
    ) -> None:
        self._store = store
        self._registry = registry
        self._options = options
        self._clock = clock
        self._wakeups = wakeups

    async def enqueue(
        self, job: object, dispatch: DispatchOptions, *, session: object | None = None
    ) -> EnqueueResult:
        """Save one job, in its own transaction or in ``session``'s."""
        new_job = prepare_job(self._registry, self._options, job, dispatch, self._clock.now_ms())
        if session is not None:
            (result,) = await self._insert_joined(session, [new_job])
            return result
        (result,) = self._results(await self._store.job_insert_many([[new_job]], total=1))
        return result

    async def enqueue_many(
        self, items: Iterable[tuple[object, DispatchOptions]], *, session: object | None = None
    ) -> list[EnqueueResult]:
        """Save many jobs in one transaction (the store's or ``session``'s)."""
        now = self._clock.now_ms()
        items = list(items)
        registry, options = self._registry, self._options
        if session is not None:
            return await self._insert_joined(session, prepare_jobs(registry, options, items, now))

        def chunks() -> Iterator[list[NewJob]]:
            # A large batch is prepared chunk by chunk, so a dialect can insert one chunk while
            # the next is validated and serialized. Still one transaction: a job that fails
            # validation rolls back every chunk before it.
            for start in range(0, len(items), PREPARE_CHUNK):
                yield prepare_jobs(registry, options, items[start : start + PREPARE_CHUNK], now)

        if len(items) <= PREPARE_CHUNK:
            # Prepared before the store is asked: a bad job never reaches the database.
            return await self.insert_prepared(prepare_jobs(registry, options, items, now))
        return self._results(await self._store.job_insert_many(chunks(), total=len(items)))

    async def insert_prepared(self, new_jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        """Insert already validated and serialized jobs and wake workers in this process."""
        return self._results(await self._store.job_insert_many([new_jobs], total=len(new_jobs)))

    async def enqueue_chain(self, steps: Iterable[tuple[object, DispatchOptions]]) -> ChainResult:
        """Save a chain's steps in one transaction; its first step's queue is woken."""
        linked = prepare_chain(self._registry, self._options, steps, self._clock.now_ms())
        ids, created = await self._store.chain_insert(linked)
        if created:
            self._wakeups.notify({linked[0].job.queue})
        return ChainResult(ids[0], ids, already_enqueued=not created)

    async def enqueue_batch(
        self,
        jobs: Iterable[tuple[object, DispatchOptions]],
        *,
        callback: tuple[object, DispatchOptions] | None = None,
    ) -> BatchResult:
        """Save a batch and its callback in one transaction; its members' queues are woken."""
        batch, members, held = prepare_batch(
            self._registry, self._options, jobs, callback, self._clock.now_ms()
        )
        await self._store.batch_insert(batch, members, held)
        self._wakeups.notify({member.job.queue for member in members})
        return BatchResult(batch.id, [m.job.id for m in members], batch.callback_id)

    async def enqueue_workflow(
        self, workflow: Workflow, *, session: object | None = None
    ) -> WorkflowResult:
        """Save a workflow's steps, their dependencies and waits in one transaction (the
        store's or ``session``'s); the queues of its ready steps are woken."""
        new = prepare_workflow(self._registry, self._options, workflow, self._clock.now_ms())
        if session is not None:
            return await self._insert_workflow_joined(session, new)
        found, created = await self._store.workflow_insert(new)
        if not created:
            ids = await step_ids_of(self._store, found, new.tenant_id)
            return WorkflowResult(found, already_enqueued=True, step_ids=ids)
        self._wakeups.notify({step.job.queue for step in new.steps if not step.after})
        return WorkflowResult(found, already_enqueued=False, step_ids=step_ids(new))

    async def _insert_workflow_joined(self, session: object, new: NewWorkflow) -> WorkflowResult:
        """A workflow inserted in the caller's transaction; its ready steps' queues are woken
        when that transaction commits."""
        found, created = await self._store.workflow_insert_joined(
            session, new, on_commit=self._wakeups.notify
        )
        if not created:
            ids = await step_ids_of(self._store, found, new.tenant_id)
            return WorkflowResult(found, already_enqueued=True, step_ids=ids)
        return WorkflowResult(found, already_enqueued=False, step_ids=step_ids(new))

    async def _insert_joined(
        self, session: object, new_jobs: Sequence[NewJob]
    ) -> list[EnqueueResult]:
        inserted = await self._store.job_insert_joined(
            session, new_jobs, on_commit=self._wakeups.notify
        )
        return self._results(inserted, wake=False)

    def _results(self, inserted: InsertResult, *, wake: bool = True) -> list[EnqueueResult]:
        """Wake this process's workers for the queues that got jobs (unless ``wake`` is false:
        the caller's commit will); the caller's results."""
        if wake:
            self._wakeups.notify(woken_queues(inserted))
        return enqueue_results(inserted)


_QUEUE = operator.attrgetter("queue")
_ID = operator.attrgetter("id")


def woken_queues(inserted: InsertResult) -> set[str]:
    """The queues an insert brought jobs (new ones, or pending ones replaced): those whose
    workers in this process are woken."""
    new_jobs, outcomes = inserted
    if isinstance(outcomes, AllInserted):
        return set(map(_QUEUE, outcomes.jobs))
    return {
        job.queue for job, o in zip(new_jobs, outcomes, strict=True) if o.inserted or o.replaced
    }


def enqueue_results(inserted: InsertResult) -> list[EnqueueResult]:
    """The caller's results of an insert, in the order its jobs were given (the sync shell's
    insert in the caller's session reports through this too)."""
    outcomes = inserted[1]
    if isinstance(outcomes, AllInserted):
        return _created(map(_ID, outcomes.jobs))
    return [EnqueueResult(o.job_id, not o.inserted, o.replaced) for o in outcomes]


_new_object = object.__new__
_set_job_id, _set_already_enqueued, _set_replaced = (
    EnqueueResult.__dict__[name].__set__ for name in ("job_id", "already_enqueued", "replaced")
)


def _created(job_ids: Iterable[UUID]) -> list[EnqueueResult]:
    """``EnqueueResult(job_id, False)`` for each id, its slots set as its dataclass
    ``__init__`` sets them (``object.__setattr__``, the class being frozen) without a Python
    call per result: the largest part of a bulk enqueue's results."""
    results: list[EnqueueResult] = []
    append = results.append
    for job_id in job_ids:
        result = _new_object(EnqueueResult)
        _set_job_id(result, job_id)
        _set_already_enqueued(result, False)
        _set_replaced(result, False)
        append(result)
    return results
