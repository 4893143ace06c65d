"""Caravel: a durable job queue in your application's own PostgreSQL or SQLite database.

The public API is exactly the names in ``__all__``; modules not listed here are internal.

Each name is imported from its module when it is first used, so ``import caravel`` costs almost
nothing and a program pays only for what it touches: a producer never loads the worker, a
worker never loads the outbox or Alembic, and a database driver loads when a URL of its kind is
opened.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from caravel._lazy import lazy_attributes

if TYPE_CHECKING:
    from caravel.attempts import AttemptOutcome, AttemptRecord
    from caravel.batches import BatchResult, BatchStatus
    from caravel.cancelling import MatchedJobs
    from caravel.chains import ChainResult, ChainStatus
    from caravel.clock import Clock, SystemClock
    from caravel.context import BatchOutcome, CancellationSignal, JobContext
    from caravel.directives import Discard, JobFailed, Snooze
    from caravel.errors import (
        CaravelError,
        DatabaseNotFoundError,
        DatabaseVersionError,
        DowngradeRefusedError,
        IdempotencyConflictError,
        JobCancelledError,
        LeaseLostError,
        OptionsError,
        PendingKeyConflictError,
        RegistrationError,
        ScheduleError,
        SchemaNotReadyError,
        StoreError,
        SyncQueueError,
        UnknownJobTypeError,
        ValidationError,
        WorkflowError,
    )
    from caravel.flow import ConcurrencyLimit, RateLimit
    from caravel.hooks import DeadLetterEvent, StuckEvent
    from caravel.inspector import QueueInspector, QueueLimitRecord, QueuePause, ScheduleRecord
    from caravel.jobs import (
        DEFAULT_TENANT,
        CancelOutcome,
        ClaimedJob,
        DispatchOptions,
        EnqueueResult,
        FailureCategory,
        JobState,
        JobStatus,
        Lease,
        WorkerInfo,
    )
    from caravel.options import QueueOptions, RetryPolicy, WorkerOptions
    from caravel.outbox import Outbox, OutboxEnvelope, OutboxRelay, StagedIntent, add_outbox
    from caravel.progress import JobProgress
    from caravel.queue import DatabaseQueue
    from caravel.registry import JobRegistry
    from caravel.retention import Retention
    from caravel.schedules import Schedule
    from caravel.store.protocol import QueueCounts
    from caravel.store.pruning import PruneBatch
    from caravel.sync import SyncQueue
    from caravel.worker import FailureOutcome, Leases, QueueWorker
    from caravel.worker.scheduler import Scheduler, SlotRun
    from caravel.workflows import (
        FailedDependency,
        StepOutcome,
        WaitOutcome,
        Workflow,
        WorkflowContext,
        WorkflowResult,
        WorkflowStatus,
        WorkflowStep,
    )

#: Where each public name lives.
_HOMES = {
    "BatchResult": "caravel.batches",
    "BatchStatus": "caravel.batches",
    "ChainResult": "caravel.chains",
    "ChainStatus": "caravel.chains",
    "BatchOutcome": "caravel.context",
    "CancellationSignal": "caravel.context",
    "MatchedJobs": "caravel.cancelling",
    "Clock": "caravel.clock",
    "SystemClock": "caravel.clock",
    "JobContext": "caravel.context",
    "Discard": "caravel.directives",
    "JobFailed": "caravel.directives",
    "Snooze": "caravel.directives",
    "CaravelError": "caravel.errors",
    "DatabaseNotFoundError": "caravel.errors",
    "DatabaseVersionError": "caravel.errors",
    "DowngradeRefusedError": "caravel.errors",
    "IdempotencyConflictError": "caravel.errors",
    "JobCancelledError": "caravel.errors",
    "LeaseLostError": "caravel.errors",
    "OptionsError": "caravel.errors",
    "PendingKeyConflictError": "caravel.errors",
    "RegistrationError": "caravel.errors",
    "ScheduleError": "caravel.errors",
    "SchemaNotReadyError": "caravel.errors",
    "StoreError": "caravel.errors",
    "SyncQueueError": "caravel.errors",
    "UnknownJobTypeError": "caravel.errors",
    "ValidationError": "caravel.errors",
    "ConcurrencyLimit": "caravel.flow",
    "RateLimit": "caravel.flow",
    "DeadLetterEvent": "caravel.hooks",
    "StuckEvent": "caravel.hooks",
    "QueueInspector": "caravel.inspector",
    "QueueLimitRecord": "caravel.inspector",
    "QueuePause": "caravel.inspector",
    "ScheduleRecord": "caravel.inspector",
    "DEFAULT_TENANT": "caravel.jobs",
    "AttemptOutcome": "caravel.attempts",
    "AttemptRecord": "caravel.attempts",
    "CancelOutcome": "caravel.jobs",
    "ClaimedJob": "caravel.jobs",
    "DispatchOptions": "caravel.jobs",
    "EnqueueResult": "caravel.jobs",
    "FailureCategory": "caravel.jobs",
    "JobState": "caravel.jobs",
    "JobStatus": "caravel.jobs",
    "Lease": "caravel.jobs",
    "WorkerInfo": "caravel.jobs",
    "QueueOptions": "caravel.options",
    "WorkerOptions": "caravel.options",
    "JobProgress": "caravel.progress",
    "Outbox": "caravel.outbox",
    "OutboxEnvelope": "caravel.outbox",
    "OutboxRelay": "caravel.outbox",
    "StagedIntent": "caravel.outbox",
    "add_outbox": "caravel.outbox",
    "DatabaseQueue": "caravel.queue",
    "JobRegistry": "caravel.registry",
    "Retention": "caravel.retention",
    "Schedule": "caravel.schedules",
    "Scheduler": "caravel.worker.scheduler",
    "SlotRun": "caravel.worker.scheduler",
    "RetryPolicy": "caravel.options",
    "QueueCounts": "caravel.store.protocol",
    "PruneBatch": "caravel.store.pruning",
    "SyncQueue": "caravel.sync",
    "FailureOutcome": "caravel.worker",
    "Leases": "caravel.worker",
    "QueueWorker": "caravel.worker",
    "FailedDependency": "caravel.workflows",
    "StepOutcome": "caravel.workflows",
    "WaitOutcome": "caravel.workflows",
    "Workflow": "caravel.workflows",
    "WorkflowContext": "caravel.workflows",
    "WorkflowResult": "caravel.workflows",
    "WorkflowStatus": "caravel.workflows",
    "WorkflowStep": "caravel.workflows",
    "WorkflowError": "caravel.errors",
}


#: Public modules, imported on first use as attributes too (``caravel.migrate.upgrade(...)``).
_MODULES = ("migrate", "testing")

__getattr__ = lazy_attributes("caravel", globals(), _HOMES, modules=_MODULES)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__version__ = "0.1.0"

__all__ = [
    "DEFAULT_TENANT",
    "AttemptOutcome",
    "AttemptRecord",
    "BatchOutcome",
    "BatchResult",
    "BatchStatus",
    "CancelOutcome",
    "CancellationSignal",
    "CaravelError",
    "ChainResult",
    "ChainStatus",
    "ClaimedJob",
    "Clock",
    "ConcurrencyLimit",
    "DatabaseNotFoundError",
    "DatabaseQueue",
    "DatabaseVersionError",
    "DeadLetterEvent",
    "Discard",
    "DispatchOptions",
    "DowngradeRefusedError",
    "EnqueueResult",
    "FailedDependency",
    "FailureCategory",
    "FailureOutcome",
    "IdempotencyConflictError",
    "JobCancelledError",
    "JobContext",
    "JobFailed",
    "JobProgress",
    "JobRegistry",
    "JobState",
    "JobStatus",
    "Lease",
    "LeaseLostError",
    "Leases",
    "MatchedJobs",
    "OptionsError",
    "Outbox",
    "OutboxEnvelope",
    "OutboxRelay",
    "PendingKeyConflictError",
    "PruneBatch",
    "QueueCounts",
    "QueueInspector",
    "QueueLimitRecord",
    "QueueOptions",
    "QueuePause",
    "QueueWorker",
    "RateLimit",
    "RegistrationError",
    "Retention",
    "RetryPolicy",
    "Schedule",
    "ScheduleError",
    "ScheduleRecord",
    "Scheduler",
    "SchemaNotReadyError",
    "SlotRun",
    "Snooze",
    "StagedIntent",
    "StepOutcome",
    "StoreError",
    "StuckEvent",
    "SyncQueue",
    "SyncQueueError",
    "SystemClock",
    "UnknownJobTypeError",
    "ValidationError",
    "WaitOutcome",
    "WorkerInfo",
    "WorkerOptions",
    "Workflow",
    "WorkflowContext",
    "WorkflowError",
    "WorkflowResult",
    "WorkflowStatus",
    "WorkflowStep",
    "__version__",
    "add_outbox",
]
