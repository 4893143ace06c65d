"""The application's entry point: enqueue jobs, read their status and payload, replay dead
letters, cancel and delete jobs.

:class:`DatabaseQueue` is an internal API for your application and its workers. Take tenant ids
from the verified caller, and don't expose these methods directly to clients. Operators read the
queue through :class:`~caravel.inspector.QueueInspector`; workers hold leases through
:class:`~caravel.worker.Leases`.

The facade holds the public methods and their documentation; what takes more than one call of
the store lives with its concept: the insert paths and their wake-ups in
:mod:`~caravel.queue.enqueueing`, cancelling and deleting by filter in :mod:`caravel.cancelling`,
pruning in :mod:`caravel.prune`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

from caravel._closing import AsyncClosing
from caravel.attempts import AttemptRecord
from caravel.batches import BatchResult, BatchStatus, batch_status
from caravel.chains import ChainResult, ChainStatus, chain_status
from caravel.clock import Clock, SystemClock
from caravel.errors import ValidationError
from caravel.flow.concurrency import ConcurrencyLimit
from caravel.flow.rate import RateLimit
from caravel.jobs import (
    DEFAULT_TENANT,
    CancelOutcome,
    DispatchOptions,
    EnqueueResult,
    JobState,
    JobStatus,
)
from caravel.lookup import job_ref, parse_job_id
from caravel.migrate import require_current_schema
from caravel.options import QueueOptions
from caravel.queue.enqueueing import PREPARE_CHUNK as PREPARE_CHUNK
from caravel.queue.enqueueing import Enqueuer
from caravel.registry import JobRegistry
from caravel.retention import DEFAULT_PRUNE_BATCH, DEFAULT_PRUNE_PAUSE, Retention
from caravel.signals import WakeupHub
from caravel.store import open_store
from caravel.store.protocol import LimitKind, NewJob, Store
from caravel.store.pruning import PruneBatch
from caravel.validation import check_identifier, check_queue_name, check_schedule_name
from caravel.workflows import Workflow, WorkflowResult, WorkflowStatus
from caravel.workflows.operations import read_workflow, signal_payload, workflow_signal_name

if TYPE_CHECKING:
    import sqlalchemy as sa

    from caravel.cancelling import MatchedJobs

__all__ = ["DatabaseQueue"]


class DatabaseQueue(AsyncClosing):
    """A durable queue in a PostgreSQL or SQLite database.

    ``target`` is a database URL (``postgresql://...``, ``sqlite:///queue.db``) or an already
    opened :class:`~caravel.store.protocol.Store`. The queue never creates its tables: apply the
    migrations first (``caravel db upgrade``). Use it as an async context manager, or call
    :meth:`close`, to release its connections.

    ``store``, ``options``, ``clock`` and ``wakeups`` are what a
    :class:`~caravel.QueueWorker` or :class:`~caravel.OutboxRelay` built on this queue shares
    with it.
    """

    def __init__(
        self,
        target: str | sa.URL | Store,
        registry: JobRegistry,
        *,
        options: QueueOptions | None = None,
        clock: Clock | None = None,
    ) -> None:
        if not isinstance(registry, JobRegistry):
            raise ValidationError("registry", "must be a JobRegistry")
        # Every store operation is traced and measured at this one seam.
        self.store: Store = open_store(target)
        self.registry = registry
        self.options = options if options is not None else QueueOptions()
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.wakeups = WakeupHub()
        self._enqueuer = Enqueuer(self.store, registry, self.options, self.clock, self.wakeups)

    async def close(self) -> None:
        """Release the database connections. Closing again does nothing."""
        await self.store.close()

    async def check_schema(self) -> None:
        """Raise :class:`~caravel.errors.SchemaNotReadyError` unless the database is at the
        library's newest migration."""
        await require_current_schema(self.store)

    # ----- enqueue -------------------------------------------------------------------------

    async def enqueue(
        self, job: object, dispatch: DispatchOptions, *, session: object | None = None
    ) -> EnqueueResult:
        """Save one job, durably, and return its id once the row is committed.

        With an idempotency key, repeating the same queue, tenant, key, job type and payload
        returns the original job (``already_enqueued=True``), even after it finished, and changes
        nothing. The same key with different content raises
        :class:`~caravel.errors.IdempotencyConflictError`.

        With ``session`` (a SQLAlchemy ``AsyncSession``, ``AsyncConnection``, ``Session`` or
        ``Connection``, or a psycopg, PyMySQL or ``sqlite3`` connection, on the queue's own
        database) the job is inserted in the transaction that session has open instead, and
        exists exactly when that transaction commits: a rollback leaves no job. Workers are woken
        when it commits, not before.
        """
        return await self._enqueuer.enqueue(job, dispatch, session=session)

    async def enqueue_many(
        self, items: Iterable[tuple[object, DispatchOptions]], *, session: object | None = None
    ) -> list[EnqueueResult]:
        """Save many jobs in one transaction; results come back in the order given.

        A job that fails validation raises :class:`~caravel.errors.ValidationError` and nothing
        of the call is written. Idempotency keys are honoured per job, including between jobs
        of the same call. A conflict rolls back the whole call. ``session`` as for
        :meth:`enqueue`: the jobs go into that session's transaction (a conflict raises, and
        the caller rolls its transaction back).
        """
        return await self._enqueuer.enqueue_many(items, session=session)

    async def insert_prepared(self, new_jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        """Insert already validated and serialized jobs (enqueue and the outbox relay share
        this path) and wake workers in this process."""
        return await self._enqueuer.insert_prepared(new_jobs)

    # ----- workflows -------------------------------------------------------------------------

    async def enqueue_workflow(
        self, workflow: Workflow, *, session: object | None = None
    ) -> WorkflowResult:
        """Save a workflow (:class:`~caravel.Workflow`): every step, dependency and wait in one
        transaction, or none. A graph that breaks a rule raises
        :class:`~caravel.errors.WorkflowError` naming the step and the rule, and writes
        nothing. With the workflow's idempotency key, the same graph again returns the saved
        workflow (``already_enqueued``); another graph under that key raises
        :class:`~caravel.errors.IdempotencyConflictError`."""
        return await self._enqueuer.enqueue_workflow(workflow, session=session)

    async def get_workflow(
        self, workflow_id: UUID | str, tenant_id: str = DEFAULT_TENANT
    ) -> WorkflowStatus | None:
        """A workflow of this exact tenant, its state, counts and steps with their results;
        ``None`` when there is none."""
        found = parse_job_id(workflow_id, "workflow_id")
        tenant = check_identifier(tenant_id, "tenant_id")
        return await read_workflow(self.store, found, tenant, results=True)

    async def cancel_workflow(
        self, workflow_id: UUID | str, tenant_id: str = DEFAULT_TENANT
    ) -> int:
        """Cancel every step of the workflow that has not finished (a running step gets the
        cancel request any running job gets) and mark it cancelled; how many steps were
        cancelled (0 when there is no such workflow of this tenant)."""
        found = parse_job_id(workflow_id, "workflow_id")
        tenant = check_identifier(tenant_id, "tenant_id")
        return await self.store.workflow_cancel(found, tenant, self.clock.now_ms())

    async def signal(
        self,
        workflow_id: UUID | str,
        name: str,
        payload: object = None,
        *,
        tenant_id: str = DEFAULT_TENANT,
    ) -> bool:
        """Send signal ``name`` with ``payload`` (a JSON value, at most ``max_payload_bytes``)
        to the workflow: steps waiting for it (``wait_for=name``) stop waiting, and read the
        payload with ``ctx.workflow.wait()``. False, and nothing changed, when the workflow
        already had this signal or there is no such workflow of this tenant."""
        found = parse_job_id(workflow_id, "workflow_id")
        tenant = check_identifier(tenant_id, "tenant_id")
        text = signal_payload(payload, self.options.max_payload_bytes)
        signal_name = workflow_signal_name(name)
        now = self.clock.now_ms()
        return await self.store.workflow_signal(found, tenant, signal_name, text, now)

    # ----- chains and batches --------------------------------------------------------------

    async def enqueue_chain(self, steps: Iterable[tuple[object, DispatchOptions]]) -> ChainResult:
        """Save a chain: jobs that run one after another, each once the one before it has
        completed, handed that one's result (:attr:`~caravel.JobContext.previous_result`). All
        steps are saved now, in one transaction; a dead-lettered or cancelled step stops the
        chain, and replaying it resumes. An idempotency key on the first step makes the whole
        chain idempotent (see :mod:`caravel.chains` for the rules)."""
        return await self._enqueuer.enqueue_chain(steps)

    async def get_chain(
        self, chain_id: UUID | str, tenant_id: str = DEFAULT_TENANT
    ) -> ChainStatus | None:
        """A chain's steps and state, for this exact tenant; ``None`` when there is none."""
        found = parse_job_id(chain_id, "chain_id")
        tenant = check_identifier(tenant_id, "tenant_id")
        return chain_status(found, await self.store.chain_steps(found, tenant))

    async def enqueue_batch(
        self,
        jobs: Iterable[tuple[object, DispatchOptions]],
        *,
        callback: tuple[object, DispatchOptions] | None = None,
    ) -> BatchResult:
        """Save a batch of jobs, and ``callback``, a job that runs once when every one of them
        has finished, handed their counts (:attr:`~caravel.JobContext.batch`). One
        transaction; follow it with :meth:`get_batch`."""
        return await self._enqueuer.enqueue_batch(jobs, callback=callback)

    async def get_batch(
        self, batch_id: UUID | str, tenant_id: str = DEFAULT_TENANT
    ) -> BatchStatus | None:
        """How a batch stands (total, pending, completed, failed, cancelled), for this exact
        tenant; ``None`` when there is none."""
        found = parse_job_id(batch_id, "batch_id")
        record = await self.store.batch_get(found, check_identifier(tenant_id, "tenant_id"))
        return None if record is None else batch_status(record)

    # ----- status and replay ---------------------------------------------------------------

    async def get_status(
        self, job_id: UUID | str, queue: str, tenant_id: str = DEFAULT_TENANT
    ) -> JobStatus | None:
        """The job's status, or ``None`` when no job has this id in this queue for this exact
        tenant (matching is case-sensitive). Without ``tenant_id`` the tenant is
        :data:`~caravel.DEFAULT_TENANT`, the one jobs enqueued without a tenant have."""
        return await self.store.job_get(job_ref(job_id, queue, tenant_id))

    async def get_attempts(
        self, job_id: UUID | str, queue: str, tenant_id: str = DEFAULT_TENANT
    ) -> list[AttemptRecord] | None:
        """The job's attempt history, oldest first, with the same exact matching as
        :meth:`get_status` (``None`` when there is no such job): one record per attempt that
        ended (completed, failed, snoozed, cancelled, timed out, discarded, or whose lease
        expired and was taken over), naming its worker, when it ran and how it ended, never a
        payload or an exception's message. A job keeps its last
        :attr:`WorkerOptions.attempt_history <caravel.WorkerOptions.attempt_history>` records;
        :attr:`JobStatus.attempts_dropped <caravel.JobStatus.attempts_dropped>` counts those
        deleted before them."""
        return await self.store.job_attempts(job_ref(job_id, queue, tenant_id))

    async def get_payload(
        self, job_id: UUID | str, queue: str, tenant_id: str = DEFAULT_TENANT
    ) -> str | None:
        """The job's stored payload (canonical JSON text), with the same exact matching as
        :meth:`get_status`. Payloads may be private: show them only to those allowed."""
        return await self.store.job_get_payload(job_ref(job_id, queue, tenant_id))

    async def get_result(
        self, job_id: UUID | str, queue: str, tenant_id: str = DEFAULT_TENANT
    ) -> Any:
        """What the job's handler returned, decoded from its stored JSON, with the same exact
        matching as :meth:`get_status`. ``None`` when no such job exists, it has not completed,
        or its handler returned ``None`` (tell them apart with :meth:`get_status`)."""
        text = await self.store.job_get_result(job_ref(job_id, queue, tenant_id))
        return None if text is None else json.loads(text)

    async def replay(self, job_id: UUID | str, queue: str, tenant_id: str = DEFAULT_TENANT) -> bool:
        """Make a dead-lettered job run again: same id and payload, attempts reset to zero, due
        now. Returns ``False`` (and changes nothing) for any job that is not a dead letter of
        this queue and tenant. Replay repeats side effects; treat it as an administrative
        action."""
        return await self.store.job_replay(job_ref(job_id, queue, tenant_id), self.clock.now_ms())

    # ----- retention -----------------------------------------------------------------------

    async def prune(
        self,
        retention: Retention,
        *,
        queue: str | None = None,
        limit: int = DEFAULT_PRUNE_BATCH,
        dry_run: bool = False,
        pause: timedelta = DEFAULT_PRUNE_PAUSE,
    ) -> PruneBatch:
        """Remove finished jobs older than ``retention`` allows, from ``queue`` or every queue,
        in batches of at most ``limit`` rows (1 to 10,000), each its own short transaction.
        Batches are ``pause`` apart (0 to 10 s, default 150 ms), leaving the database to
        workers in between. A keyed job leaves a tombstone that keeps its key's duplicate
        protection until ``retention.keys`` has passed; a keyless one is deleted. Returns the
        totals;
        ``dry_run`` only counts. ``busy`` in the result: another pruner is running, and this
        call stopped at once (nothing waits for it)."""
        from caravel import prune

        prune.check_prune(retention, queue, limit, pause)
        return await prune.prune(
            self.store,
            self.clock,
            retention,
            queue=queue,
            limit=limit,
            dry_run=dry_run,
            pause=pause,
        )

    # ----- pausing queues (operator actions) -----------------------------------------------

    async def pause_queue(self, queue: str) -> bool:
        """Stop every worker, on every host, from claiming ``queue``'s jobs until
        :meth:`resume_queue`. Enqueues still succeed (the jobs wait), and jobs already running
        finish and are recorded as usual. Workers learn of it within their ``poll_interval``
        (on PostgreSQL at once, through a notification). Returns ``False`` when the queue was
        paused already (nothing changes)."""
        check_queue_name(queue)
        return await self.store.queue_pause(queue, self.clock.now_ms())

    async def resume_queue(self, queue: str) -> bool:
        """Let workers claim ``queue``'s jobs again; ``False`` when it was not paused."""
        check_queue_name(queue)
        return await self.store.queue_resume(queue, self.clock.now_ms())

    # ----- concurrency and rate limits (operator actions) -----------------------------------

    async def set_queue_limit(self, limit: ConcurrencyLimit | RateLimit) -> None:
        """Store ``limit`` as its queue's concurrency limits or its rates, replacing those of
        the same kind (a cap it leaves ``None`` is removed) and keeping the other kind. Workers
        on every host follow it within their ``poll_interval`` (on PostgreSQL at once, through
        a notification). Raises :class:`~caravel.errors.ValidationError` when it is neither a
        :class:`~caravel.ConcurrencyLimit` nor a :class:`~caravel.RateLimit`, or a rate is
        below the weight of a job waiting in the queue; nothing is stored then."""
        await self.store.queue_limit_set(limit, self.clock.now_ms())

    async def clear_queue_limit(self, queue: str, kind: LimitKind = "all") -> bool:
        """Remove ``queue``'s limits of ``kind`` (``"concurrency"``, ``"rate"`` or ``"all"``);
        its waiting jobs are claimed without them as soon as workers read the change.
        ``False`` when it had none of that kind."""
        check_queue_name(queue)
        return await self.store.queue_limit_clear(queue, self.clock.now_ms(), kind)

    async def pause_schedule(self, name: str) -> bool:
        """Stop every scheduler from enqueueing schedule ``name``'s slots until
        :meth:`resume_schedule`; slots that come due meanwhile are passed over, not caught up.
        Returns ``False`` when it was paused already. The name need not be registered here."""
        check_schedule_name(name)
        return await self.store.schedule_pause(name, self.clock.now_ms())

    async def resume_schedule(self, name: str) -> bool:
        """Let schedulers enqueue ``name``'s slots again, from its next slot; ``False`` when it
        was not paused."""
        check_schedule_name(name)
        return await self.store.schedule_resume(name, self.clock.now_ms())

    # ----- cancel and delete ---------------------------------------------------------------

    async def cancel(
        self, job_id: UUID | str, queue: str, tenant_id: str = DEFAULT_TENANT
    ) -> CancelOutcome:
        """Cancel one job, matched exactly as :meth:`get_status` matches it. A waiting job
        (ready, delayed or due for a retry) is ``cancelled`` at once and never claimed. A running
        one is ``cancelled`` at once too and its lease fenced: the worker running it is told
        (within a second on PostgreSQL, within a poll interval elsewhere) and cancels its
        handler, and nothing that handler reports afterwards changes the job. A finished job
        is left alone (:attr:`~caravel.CancelOutcome.ALREADY_FINISHED`)."""
        ref = job_ref(job_id, queue, tenant_id)
        return await self.store.job_cancel(ref, self.clock.now_ms())

    async def delete(self, job_id: UUID | str, queue: str, tenant_id: str = DEFAULT_TENANT) -> bool:
        """Delete one finished (completed, dead-lettered or cancelled) job, matched exactly;
        ``False``, and nothing changed, for any other job. An operator's action: the row, its
        payload and its idempotency key are gone (the key may be used again)."""
        return await self.store.job_delete(job_ref(job_id, queue, tenant_id))

    async def cancel_matching(
        self,
        queue: str,
        *,
        job_type: str | None = None,
        tenant_id: str | None = None,
        states: Iterable[JobState | str] | None = None,
        older_than: timedelta | None = None,
        dry_run: bool = False,
    ) -> MatchedJobs:
        """Cancel every waiting or running job of ``queue`` that matches (of this wire name,
        this exact tenant, in these stored states, created more than ``older_than`` ago), in
        bounded batches, as :meth:`cancel` cancels one. Says how many matched, per state, and
        how many were cancelled; with ``dry_run`` nothing changes."""
        return await self._matching(
            queue, False, job_type, tenant_id, states, older_than, dry_run=dry_run
        )

    async def delete_matching(
        self,
        queue: str,
        *,
        job_type: str | None = None,
        tenant_id: str | None = None,
        states: Iterable[JobState | str] | None = None,
        older_than: timedelta | None = None,
        dry_run: bool = False,
    ) -> MatchedJobs:
        """Delete every finished job of ``queue`` that matches (``older_than``: finished that
        long ago), in bounded batches. Says how many matched, per state, and how many were
        deleted; with ``dry_run`` nothing changes."""
        return await self._matching(
            queue, True, job_type, tenant_id, states, older_than, dry_run=dry_run
        )

    async def _matching(
        self,
        queue: str,
        deleting: bool,
        job_type: str | None,
        tenant_id: str | None,
        states: Iterable[JobState | str] | None,
        older_than: timedelta | None,
        *,
        dry_run: bool,
    ) -> MatchedJobs:
        from caravel import cancelling

        return await cancelling.act_on_matching(
            self.store,
            queue,
            self.clock.now_ms(),
            deleting=deleting,
            job_type=job_type,
            tenant_id=tenant_id,
            states=states,
            older_than=older_than,
            dry_run=dry_run,
        )
