"""Caravel: a durable job queue in your application's own PostgreSQL or SQLite database.

The public API is exactly the names in ``__all__``; modules not listed here are internal.
"""

from caravel.clock import Clock, SystemClock
from caravel.context import JobContext
from caravel.errors import (
    CaravelError,
    IdempotencyConflictError,
    JobCancelledError,
    LeaseLostError,
    OptionsError,
    RegistrationError,
    SchemaNotReadyError,
    StoreError,
    UnknownJobTypeError,
    ValidationError,
)
from caravel.inspector import QueueInspector
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
from caravel.queue import DatabaseQueue
from caravel.registry import JobRegistry
from caravel.store.protocol import QueueCounts
from caravel.worker import FailureOutcome, Leases, QueueWorker

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
    "Leases",
    "OptionsError",
    "Outbox",
    "OutboxEnvelope",
    "OutboxRelay",
    "QueueCounts",
    "QueueInspector",
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
