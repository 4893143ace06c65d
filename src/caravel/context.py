"""What a handler knows about the job it is running."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar
from uuid import UUID

from caravel.errors import JobCancelledError, ValidationError
from caravel.progress import ProgressReport

if TYPE_CHECKING:
    from caravel.workflows.context import WorkflowContext

__all__ = ["BatchOutcome", "CancellationSignal", "JobContext", "JoinedCompletion", "handed"]

ScopeT = TypeVar("ScopeT")


class CancellationSignal:
    """Set once when the job is cancelled; safe to check from any thread.

    It behaves like a :class:`threading.Event` for the parts a handler needs (``is_set``,
    ``wait``), but costs almost nothing until someone waits on it.
    """

    __slots__ = ("_event", "_set")

    def __init__(self) -> None:
        self._set = False
        self._event: threading.Event | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        event = self._event
        if event is not None:
            event.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block the calling thread until the job is cancelled or ``timeout`` seconds pass;
        returns whether it was cancelled. For synchronous handlers only."""
        if self._set:
            return True
        if self._event is None:
            self._event = threading.Event()
            if self._set:  # set between the check above and the event's creation
                self._event.set()
        return self._event.wait(timeout)


@dataclass(frozen=True, slots=True)
class BatchOutcome:
    """What a batch's callback is handed (:attr:`JobContext.batch`): the batch's counts when
    its last job finished (``failed`` counts the dead-lettered ones)."""

    batch_id: UUID
    total: int
    completed: int
    failed: int
    cancelled: int


def handed(upstream: str | None) -> tuple[Any, BatchOutcome | None]:
    """The previous step's result and the batch outcome in a job's stored ``upstream`` (JSON
    the database wrote when it released the job)."""
    if upstream is None:
        return None, None
    found = json.loads(upstream)
    batch = found.get("batch")
    if batch is None:
        return found.get("result"), None
    outcome = BatchOutcome(
        batch_id=UUID(str(batch["batch_id"])),
        total=int(batch["total"]),
        completed=int(batch["completed"]),
        failed=int(batch["dead_letter"]),
        cancelled=int(batch["cancelled"]),
    )
    return None, outcome


class JoinedCompletion(Protocol):
    """What completes a job in its handler's own transaction (the worker's side of
    :meth:`JobContext.complete_in`; a handler calls that instead)."""

    async def complete(self, target: object, result: object) -> None: ...

    def complete_sync(self, target: object, result: object) -> None: ...


_NO_WORKER = (
    "complete_in needs a job run by a worker of a SQL queue (PostgreSQL, SQLite or MariaDB); "
    "this context has no lease to complete"
)


@dataclass(kw_only=True, slots=True, eq=False)
class JobContext(Generic[ScopeT]):
    """The stored identity of the job being run, and its cancellation signal.

    Use ``tenant_id`` (the tenant stored with the job) to scope the handler's data access; a
    tenant field inside the payload is not trustworthy. ``job_id`` is stable across every retry
    and makes a good key for repeat-safe effects. ``scope`` is the value of the per-job scope the
    application supplied to the worker (``None`` without one).

    Async handlers are cancelled like any asyncio task. Synchronous handlers run in a thread and
    should check :attr:`is_cancelled` (or call :meth:`raise_if_cancelled`, or block on
    ``cancelled.wait(timeout)``) between steps.

    :meth:`progress` and :meth:`set_meta` tell operators how the job is doing while it runs
    (``get_status``, ``caravel jobs show``, the dashboard). They are plain calls from async and
    synchronous handlers alike: they return at once, and the worker writes the latest values
    under the job's lease at most once per :attr:`~caravel.WorkerOptions.progress_interval`,
    and always before the job's outcome.
    """

    job_id: UUID
    queue: str
    tenant_id: str
    job_type: str
    attempt: int
    max_attempts: int
    scope: ScopeT
    cancelled: CancellationSignal = field(default_factory=CancellationSignal)
    previous_result: Any = None
    """For a chain's later step: what the step before it returned (decoded from its stored
    JSON); ``None`` for other jobs, or when that step returned ``None``."""
    batch: BatchOutcome | None = None
    """For a batch's callback: the batch's counts when its last job finished."""
    workflow: WorkflowContext | None = None
    """For a workflow's step: which workflow and step it is, and reads of the results of the
    steps it ran after (see :class:`~caravel.WorkflowContext`); ``None`` for other jobs."""
    report: ProgressReport = field(default_factory=ProgressReport, repr=False, compare=False)
    """Where :meth:`progress` and :meth:`set_meta` keep what they were told until the worker
    writes it (the worker's side of those calls; a handler calls them instead)."""
    joined: JoinedCompletion | None = field(default=None, repr=False, compare=False)
    """What :meth:`complete_in` runs on (the worker's side of it); ``None`` outside a worker."""

    @property
    def is_cancelled(self) -> bool:
        return self.cancelled.is_set()

    def progress(
        self, done: int | float, total: int | float | None = None, note: str | None = None
    ) -> None:
        """Report how far the job got: ``done`` of ``total`` (``None``: no total known), with
        an optional ``note`` such as ``"resizing images"``.

        ``done`` is a finite number from 0, ``total`` a finite number above 0 and at least
        ``done`` (both at most 2**53), ``note`` at most 200 characters without control
        characters. Anything else raises :class:`~caravel.errors.ValidationError` naming the
        field, and the report is not changed. Only the latest report counts: calling this in a
        tight loop is cheap, the worker writes at most one per interval. The note is shown to
        every operator: never put secrets or personal data in it."""
        self.report.progress(done, total, note)

    def set_meta(self, key: str, value: object) -> None:
        """Set ``key`` of the job's metadata to ``value``, any JSON value (a dict, list, str,
        finite number, bool or ``None``); the worker writes the whole object with the next
        report. ``key`` follows the rules of tenant ids (nonblank, at most 128 characters, no
        control characters).

        The metadata of one attempt, as JSON, is at most 8 KiB
        (:data:`~caravel.limits.MAX_META_BYTES`). A key that breaks its rules, a value JSON
        cannot hold, or one that would make the metadata too large raises
        :class:`~caravel.errors.ValidationError` naming ``key`` or ``value``, and changes
        nothing. An attempt's metadata, once written, replaces what an earlier attempt of the
        job stored. Like the note, it is shown to operators: ids and counts, not secrets."""
        self.report.set_meta(key, value)

    async def complete_in(self, session: object, *, result: object = None) -> None:
        """Complete this job inside the transaction ``session`` has open, so that the
        handler's own writes and the job's completion commit together, or neither does.

        ``session`` is a SQLAlchemy ``AsyncSession``, ``AsyncConnection``, ``Session`` or
        ``Connection`` (or a psycopg, PyMySQL or ``sqlite3`` connection) on the queue's own
        database. The completion is the worker's own, fenced by this attempt's lease: if the
        lease is no longer held (it expired and another worker took the job over, or the job
        was cancelled), it changes nothing and raises :class:`~caravel.errors.LeaseLostError`;
        let it propagate, so that the transaction rolls back with the handler's writes.
        ``result`` is stored as the job's result, under the rules of a returned one (JSON, at
        most :attr:`~caravel.QueueOptions.max_result_bytes`); a result that breaks them raises
        :class:`~caravel.errors.ValidationError` naming ``result`` before anything is sent.
        A chain's next step or a batch's callback is released in the same transaction.

        Nothing is committed here: the caller commits. Once the handler returns, the worker
        finds out whether that commit happened: if it did, the job is completed and whatever
        the handler returned or raised afterwards is ignored; if not (a rollback, or no commit
        at all), the attempt fails with the category ``CompletionNotCommitted`` (or the
        handler's own failure, when it raised) and is retried under the job type's policy.
        See docs/guides/transactions.md.

        A ``session`` on another database, or a queue without one (``memory://``), raises
        :class:`~caravel.errors.ValidationError` (field ``session``)."""
        joined = self.joined
        if joined is None:
            raise ValidationError("session", _NO_WORKER)
        await joined.complete(session, result)

    def complete_in_sync(self, session: object, *, result: object = None) -> None:
        """:meth:`complete_in` for a synchronous handler, with a blocking ``Session`` or
        ``Connection`` (or DB-API connection). Call it from the handler's own thread, as
        synchronous handlers run; an async handler awaits :meth:`complete_in` instead (it
        takes a blocking session too)."""
        joined = self.joined
        if joined is None:
            raise ValidationError("session", _NO_WORKER)
        joined.complete_sync(session, result)

    def raise_if_cancelled(self) -> None:
        """Raise :class:`JobCancelledError` if the job has been cancelled."""
        if self.cancelled.is_set():
            raise JobCancelledError(f"job {self.job_id} was cancelled")
