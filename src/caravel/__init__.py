"""Caravel: a durable job queue in your application's own PostgreSQL or SQLite database.

The public API is exactly the names in ``__all__``; modules not listed here are internal.
"""

from caravel.clock import Clock, SystemClock
from caravel.context import JobCancelledError, JobContext
from caravel.errors import (
    CaravelError,
    IdempotencyConflictError,
    LeaseLostError,
    OptionsError,
    RegistrationError,
    SchemaNotReadyError,
    StoreError,
    UnknownJobTypeError,
    ValidationError,
)
from caravel.jobs import (
    ClaimedJob,
    DispatchOptions,
    EnqueueResult,
    FailureCategory,
    JobState,
    JobStatus,
    Lease,
    WorkerInfo,
)
from caravel.options import QueueOptions, WorkerOptions
from caravel.outbox import Outbox, OutboxEnvelope, OutboxRelay, StagedIntent, add_outbox
from caravel.queue import DatabaseQueue, FailureOutcome
from caravel.registry import JobRegistry
from caravel.store.api import QueueCounts
from caravel.worker import QueueWorker

__version__ = "0.1.0"

__all__ = [
    "CaravelError",
    "ClaimedJob",
    "Clock",
    "DatabaseQueue",
    "DispatchOptions",
    "EnqueueResult",
    "FailureCategory",
    "FailureOutcome",
    "IdempotencyConflictError",
    "JobCancelledError",
    "JobContext",
    "JobRegistry",
    "JobState",
    "JobStatus",
    "Lease",
    "LeaseLostError",
    "OptionsError",
    "Outbox",
    "OutboxEnvelope",
    "OutboxRelay",
    "QueueCounts",
    "QueueOptions",
    "QueueWorker",
    "RegistrationError",
    "SchemaNotReadyError",
    "StagedIntent",
    "StoreError",
    "SystemClock",
    "UnknownJobTypeError",
    "ValidationError",
    "WorkerInfo",
    "WorkerOptions",
    "__version__",
    "add_outbox",
]
