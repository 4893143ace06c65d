"""Every error Caravel raises, in one tree.

::

    CaravelError
    ├── ValidationError            bad input or configuration; names the field and the rule
    │   ├── OptionsError           a QueueOptions / worker setting is out of range
    │   ├── RegistrationError      a job type or wire name registered twice, or a bad handler
    │   └── WorkflowError          a workflow's graph broke a rule; names the step and the rule
    ├── UnknownJobTypeError        enqueue of a value whose type is not registered
    ├── PrincipalTypeError         a dashboard's authorize returned neither a Principal nor None
    ├── IdempotencyConflictError   same queue, tenant and key, different job type or payload
    ├── PendingKeyConflictError    a job of another type is pending under the same pending key
    ├── LeaseLostError             a complete/fail by a worker that no longer holds the lease
    ├── JobCancelledError          raised inside a handler whose job was cancelled
    ├── SchemaNotReadyError        the database is not migrated to the library's head revision
    ├── DowngradeRefusedError      a downgrade would delete or strand rows and was not forced
    ├── DrainLimitError            caravel.testing.drain ran max_jobs jobs and more were due
    ├── ScheduleError              a schedule's slot could not be computed or enqueued
    └── StoreError                 the database failed (connection lost, read-only, ...)
        ├── DatabaseNotFoundError  a SQLite URL names a file that does not exist
        └── DatabaseVersionError   the server is older than the oldest version Caravel supports

Messages never contain payloads, tenant ids, idempotency keys or exception texts from handlers:
they name the field, the rule and, where useful, the command to run. Driver exceptions are
translated at the store seam with ``raise ... from exc`` so the cause stays available to a debugger
without reaching a log line written by the library.
"""

from __future__ import annotations

from uuid import UUID

__all__ = [
    "CaravelError",
    "DatabaseNotFoundError",
    "DatabaseVersionError",
    "DowngradeRefusedError",
    "DrainLimitError",
    "IdempotencyConflictError",
    "JobCancelledError",
    "LeaseLostError",
    "OptionsError",
    "PendingKeyConflictError",
    "PrincipalTypeError",
    "RegistrationError",
    "ScheduleError",
    "SchemaNotReadyError",
    "StoreError",
    "UnknownJobTypeError",
    "ValidationError",
    "WorkflowError",
]


class CaravelError(Exception):
    """Root of every error raised by Caravel."""


class ValidationError(CaravelError, ValueError):
    """An argument broke a rule. Nothing was written.

    ``field`` names the argument (for example ``"tenant_id"``) and ``rule`` says what it must be.
    The offending value is never part of the message.
    """

    def __init__(self, field: str, rule: str) -> None:
        self.field = field
        self.rule = rule
        super().__init__(f"{field}: {rule}")


class OptionsError(ValidationError):
    """A configuration value is outside its allowed range. Raised once, at construction."""


class RegistrationError(ValidationError):
    """A job registration was rejected: duplicate wire name, duplicate type, or bad handler."""


class WorkflowError(ValidationError):
    """A workflow's graph broke a rule (a cycle, an unknown dependency, a duplicate or bad step
    name, too many steps or edges, a key on a step...). ``step`` names the step (``None`` when
    the rule is the whole workflow's) and ``rule`` says what was wrong. Nothing was written."""

    def __init__(self, step: str | None, rule: str) -> None:
        self.step = step
        field = "workflow" if step is None else f"step {step!r}"
        super().__init__(field, rule)


class UnknownJobTypeError(CaravelError, TypeError):
    """Enqueue or staging was given a value whose type has no registration."""

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name
        super().__init__(
            f"job: type {type_name} is not registered; register it with JobRegistry.register"
        )


class PrincipalTypeError(CaravelError, TypeError):
    """The dashboard's ``authorize`` function returned something that is neither a
    :class:`caravel.web.Principal` nor ``None``: a programming error in the host application,
    so the request fails (500) instead of being answered as anonymous."""

    def __init__(self) -> None:
        super().__init__("authorize must return a caravel.web.Principal or None")


class IdempotencyConflictError(CaravelError):
    """The idempotency key is already used in this queue and tenant by different content.

    An HTTP API usually answers this with 409 Conflict. ``job_id`` is the existing job, which
    was not changed.
    """

    def __init__(self, job_id: UUID) -> None:
        self.job_id = job_id
        super().__init__(
            "idempotency_key: already used in this queue and tenant with a different "
            "job type or payload"
        )


class PendingKeyConflictError(CaravelError):
    """A job of another job type is pending (ready, delayed or retrying) under the same queue,
    tenant and ``pending_key``. ``job_id`` is that pending job, which was not changed, and
    ``queue`` its queue (the message names the queue, never the key, tenant or payload).

    An HTTP API usually answers this with 409 Conflict, as an idempotency conflict."""

    def __init__(self, job_id: UUID, queue: str) -> None:
        self.job_id = job_id
        self.queue = queue
        super().__init__(
            f"pending_key: a job of another job type is pending under this key in queue "
            f"{queue} for this tenant"
        )


class LeaseLostError(CaravelError):
    """The caller's lease is no longer current: it expired and another claim superseded it, or
    the job already finished. The write changed nothing."""

    def __init__(self, job_id: UUID) -> None:
        self.job_id = job_id
        super().__init__(f"job {job_id}: lease is no longer held by this worker")


class JobCancelledError(CaravelError):
    """Raised by :meth:`~caravel.JobContext.raise_if_cancelled` inside a handler whose job was
    cancelled: its lease was lost or expired, it reached the lease lifetime, the worker is
    shutting down, or an operator cancelled the job. The worker does not acknowledge a cancelled
    attempt; it runs again once its lease expires, except after an operator's cancel, which
    ended the job for good."""


class SchemaNotReadyError(CaravelError):
    """The queue tables are missing or not at the library's migration head."""

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(
            f"the queue schema is not ready ({detail}); run `caravel db upgrade --url URL` "
            "to apply the queue migrations"
        )


class DowngradeRefusedError(CaravelError):
    """:func:`caravel.migrate.downgrade` counted rows the downgrade would delete or jobs it
    would strand, and was not forced; nothing changed. ``target`` is the revision it was going
    to (``base`` for none), ``counts`` the rows per kind (``{"cancelled_jobs": 3}``, kinds as
    in docs/guides/migrations.md) and ``what`` the same in words. The message says how to go
    ahead: ``--force`` (``force=True``), which takes them and reports what went."""

    def __init__(self, target: str, counts: dict[str, int], what: str) -> None:
        self.target = target
        self.counts = counts
        self.what = what
        super().__init__(
            f"downgrading to {target} would {what}; nothing changed; run it again with "
            "--force (force=True in Python) to go ahead, and read docs/guides/migrations.md "
            "for what each revision takes"
        )


class DrainLimitError(CaravelError):
    """:func:`caravel.testing.drain` ran its ``max_jobs`` jobs and found more still due: most
    often a job that enqueues itself again, or one that keeps failing with a large attempt
    budget. ``ran`` is how many jobs ran before it stopped."""

    def __init__(self, ran: int) -> None:
        self.ran = ran
        super().__init__(
            f"max_jobs: drain ran {ran} jobs and more were still due; raise max_jobs, or look "
            "for a job that enqueues itself or keeps failing"
        )


class ScheduleError(CaravelError):
    """A schedule failed: its slot could not be computed (croniter found none near the
    clock's time) or its slot's job could not be enqueued or recorded (a payload that does not
    serialize, the database). ``name`` is the schedule, ``step`` what failed, ``error_type``
    the class name of the underlying exception, which is the ``__cause__``; its message is left
    out, as it could hold data. :meth:`Scheduler.run_once <caravel.Scheduler.run_once>` raises
    it after its pass, in which the other schedules went on (``failed`` names every schedule
    that failed in the pass); ``caravel schedules list`` reports it for a schedule whose next
    slot cannot be computed."""

    def __init__(
        self, name: str, step: str, error_type: str, *, failed: tuple[str, ...] = ()
    ) -> None:
        self.name = name
        self.step = step
        self.error_type = error_type
        self.failed = failed or (name,)
        message = (
            f"schedule {name}: {step} failed ({error_type}); check its cron expression and its job"
        )
        others = [other for other in self.failed if other != name]
        if others:
            message += f"; also failed: {', '.join(others)}"
        super().__init__(message)


class StoreError(CaravelError):
    """The database failed while Caravel was using it. The original driver error is the
    ``__cause__``. The message names the operation and, when the driver's reason is about the
    connection or the schema (connection refused to host and port, a database or role that does
    not exist, a read-only database), that reason in one line; a reason that could quote stored
    values (a constraint or data error) is left out.

    ``outage`` says the database was unreachable rather than the operation wrong: the
    connection was lost or refused, the server is shutting down or starting up, or it is
    read-only (a demoted primary, a standby reached during a failover). A continuous worker
    retries such an operation for :attr:`~caravel.WorkerOptions.outage_window` before it
    stops; any other database error stops it at once."""

    #: Set on instances; the subclasses below are never outages.
    outage = False

    def __init__(self, operation: str, reason: str | None = None, *, outage: bool = False) -> None:
        self.operation = operation
        self.reason = reason
        self.outage = outage
        message = f"database error during {operation}"
        super().__init__(message if reason is None else f"{message}: {reason}")


class DatabaseNotFoundError(StoreError):
    """A SQLite URL names a file that does not exist. The queue never creates a database file,
    so a mistyped or relative path fails here instead of starting an empty queue elsewhere.
    ``path`` is the absolute path the URL names."""

    def __init__(self, operation: str, path: str) -> None:
        self.operation = operation
        self.reason = "no such file"
        self.path = path
        CaravelError.__init__(
            self,
            f"there is no SQLite database file at {path}; check the URL (sqlite:///name.db is "
            "relative to the directory the command runs in, sqlite:////abs/path.db absolute)",
        )


class DatabaseVersionError(StoreError):
    """The database server is older than the oldest version Caravel supports (MariaDB before
    10.11, the oldest maintained long-term release, or a MySQL server). ``found`` is the version
    the server reported, ``needed`` the oldest one that works."""

    def __init__(self, database: str, found: str, needed: str) -> None:
        self.operation = "connect"
        self.reason = f"{database} {found}"
        self.found = found
        self.needed = needed
        CaravelError.__init__(
            self,
            f"the server runs {database} {found}; Caravel needs {database} {needed} or newer: "
            "upgrade the server or point the URL at a newer one",
        )


class SyncQueueError(CaravelError, RuntimeError):
    """A :class:`~caravel.SyncQueue` call that cannot be made: from the queue's own event loop
    (it would wait for itself), after :meth:`~caravel.SyncQueue.close`, or in a process forked
    after the queue was first used. The message says what to do instead."""
