"""The typed parameters and rows of the store protocol (:mod:`caravel.store.protocol`): what an
operation takes and what it returns, as plain values. Importing them costs nothing: no
SQLAlchemy, no driver.

All times are whole milliseconds since the epoch, supplied by the caller's clock.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, get_args, overload
from uuid import UUID

from caravel.attempts import AttemptOutcome
from caravel.jobs import ClaimedJob, JobState, Lease, ShownState
from caravel.limits import DEFAULT_ATTEMPT_HISTORY, HELD_DUE_AT

__all__ = [
    "SHOWN_STATES",
    "AllInserted",
    "ClaimBatch",
    "ClaimRequest",
    "ClaimSource",
    "Committed",
    "FailedAttempt",
    "Heartbeat",
    "InsertOutcome",
    "InsertResult",
    "JobFilter",
    "JobRef",
    "NewJob",
    "PausedQueue",
    "ProgressUpdate",
    "QueueCounts",
    "Recorder",
    "ScheduleState",
    "ShownState",
    "SnoozedAttempt",
    "ThroughputBucket",
    "ThroughputQuery",
    "WorkerRecord",
    "shown_state",
]


class NewJob(NamedTuple):
    """A validated, serialized job ready to insert. (A named tuple: a bulk enqueue builds one
    per job, and a tuple is much cheaper to build than a frozen dataclass.)"""

    id: UUID
    queue: str
    job_type: str
    tenant_id: str
    idempotency_key: str | None
    payload: str
    max_attempts: int
    due_at: int
    created_at: int
    trace_context: str | None = None
    #: The ``tags`` column's text (``,a,b,``, see :mod:`caravel.tags`), or ``None``.
    tags: str | None = None
    #: From ``MIN_PRIORITY`` to ``MAX_PRIORITY``; higher is claimed first (see ``claim_rank``).
    priority: int = 0
    #: "One pending per key": the key (column ``pending_key``), or ``None``.
    pending_key: str | None = None
    #: With a pending key, not a column: ``None`` keeps a job pending under the key as it is
    #: (dedupe); a number of ms replaces its content (debounce), its due time never later than
    #: its creation plus this.
    debounce_ms: int | None = None
    #: The job's own execution timeout in ms (column ``timeout_ms``), or ``None``: its type's.
    timeout_ms: int | None = None
    #: The key per-key concurrency limits count it under; ``None``: its tenant.
    partition_key: str | None = None
    #: What one start counts for against a rate limit; ``None``: 1.
    weight: int | None = None


class InsertOutcome(NamedTuple):
    """For one :class:`NewJob`: the id it now has, and whether this call created it (false when
    its idempotency key matched an existing job with the same type and payload, or a job was
    pending under its pending key); ``replaced`` when that pending job took its content."""

    job_id: UUID
    inserted: bool
    replaced: bool = False


_JOB_ID = operator.attrgetter("id")


class AllInserted(Sequence[InsertOutcome]):
    """The outcomes of an insert that created every one of ``jobs``, each made when read: a
    bulk insert would otherwise keep one more object per job alive until the call returns."""

    __slots__ = ("_jobs",)

    def __init__(self, jobs: Sequence[NewJob]) -> None:
        self._jobs = jobs

    @property
    def jobs(self) -> Sequence[NewJob]:
        """The jobs, every one created: what a caller that handles the common case on its own
        reads instead of an outcome per job."""
        return self._jobs

    def __len__(self) -> int:
        return len(self._jobs)

    @overload
    def __getitem__(self, index: int) -> InsertOutcome: ...
    @overload
    def __getitem__(self, index: slice) -> list[InsertOutcome]: ...
    def __getitem__(self, index: int | slice) -> InsertOutcome | list[InsertOutcome]:
        if isinstance(index, slice):
            return [InsertOutcome(job.id, True) for job in self._jobs[index]]
        return InsertOutcome(self._jobs[index].id, True)

    def __iter__(self) -> Iterator[InsertOutcome]:
        # What InsertOutcome._make does, without a Python call per job: each result is read
        # several times per call (results, wake-ups, metrics).
        fields = zip(map(_JOB_ID, self._jobs), itertools.repeat(True), itertools.repeat(False))
        return map(tuple.__new__, itertools.repeat(InsertOutcome), fields)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


#: What runs once a caller's transaction commits jobs (see :meth:`Store.job_insert_joined`):
#: given the queues that got jobs due now.
Committed = Callable[[set[str]], None] | None


class InsertResult(NamedTuple):
    """What one insert call did: every job it was given, in order, and each one's outcome."""

    jobs: list[NewJob]
    outcomes: Sequence[InsertOutcome]


#: Which jobs a claim may take: ``"ready"`` waiting jobs that are due, ``"expired"`` running jobs
#: whose lease ran out (a crashed or stalled worker's, taken over), ``"any"`` both.
ClaimSource = Literal["any", "ready", "expired"]


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """One claim: up to ``limit`` jobs of ``queue`` that are due (or whose lease expired) at
    ``now``, each leased for ``lease_ms``; ``source`` narrows which of the two.

    ``limited``: the caller knows the queue has a concurrency limit (see
    :meth:`Store.queue_limit_list`), and the claim keeps the queue's stored limits, read in its
    own transaction. Without it the claim is the plain one and no limit is read.

    ``worker_id``: the claiming worker, stored on each job it leases (``None``: none). A claim
    that takes over (or dead-letters) a job whose lease expired records that attempt as
    ``lease_expired``, keeping the job's last ``attempt_history`` records (see
    :class:`Recorder`)."""

    queue: str
    limit: int
    now: int
    lease_ms: int
    source: ClaimSource = "any"
    limited: bool = False
    worker_id: UUID | None = None
    attempt_history: int = DEFAULT_ATTEMPT_HISTORY


@dataclass(frozen=True, slots=True)
class ClaimBatch:
    """What one claim statement did: the jobs now leased to the caller, and how many jobs it
    moved to dead letter instead because their last lease expired with no attempts left."""

    claimed: list[ClaimedJob]
    dead_lettered: int


@dataclass(frozen=True, slots=True)
class Recorder:
    """Who records attempts' outcomes, and how much history each job keeps.

    Every recorded outcome (a completion, failure or snooze, and a claim's takeover of an
    expired lease) writes one attempt record naming the worker (``worker_id``, ``host``,
    ``pid``: ``None`` when unknown) in the transaction that records the outcome. Once a job's
    lease token passes ``attempt_history`` (1 to
    :data:`~caravel.limits.MAX_ATTEMPT_HISTORY`), the records of claims older than its last
    ``attempt_history`` ones are deleted there too, and counted in the job's
    ``attempts_dropped``."""

    worker_id: UUID | None = None
    host: str | None = None
    pid: int | None = None
    attempt_history: int = DEFAULT_ATTEMPT_HISTORY


@dataclass(frozen=True, slots=True)
class FailedAttempt:
    """A failed attempt to record: retry at ``retry_at`` or, when ``None``, dead-letter."""

    lease: Lease
    category: str
    retry_at: int | None
    error_class: str | None = None
    """The handler's exception class, when it raised one; ``None`` keeps the stored one."""
    detail: str | None = None
    """What the handler marked safe for operators about this failure (or a redactor made of
    it), already cleaned and bounded (:data:`~caravel.limits.MAX_DETAIL_LENGTH`); ``None``:
    nothing. Kept only in the attempt's record (the worker's failure log lines and the
    attempt's span carry it too; never a metric)."""
    outcome: AttemptOutcome = AttemptOutcome.FAILED
    """What the attempt's record says it ended with: ``failed``, ``timed_out`` or
    ``discarded``."""


@dataclass(frozen=True, slots=True)
class ProgressUpdate:
    """What a running handler reported, to store under ``lease`` at ``now``: ``progress`` and
    ``meta`` as their JSON text (checked and bounded by :mod:`caravel.progress`), each ``None``
    to leave it as stored. Storing progress sets its time (``progress_at``) to ``now``."""

    lease: Lease
    now: int
    progress: str | None
    meta: str | None = None


@dataclass(frozen=True, slots=True)
class SnoozedAttempt:
    """An attempt the handler snoozed: the job runs again at ``until`` and the attempt it used
    is given back."""

    lease: Lease
    until: int


@dataclass(frozen=True, slots=True)
class JobRef:
    """One job as its tenant names it: id, queue and exact tenant all have to match."""

    job_id: UUID
    queue: str
    tenant_id: str


@dataclass(frozen=True, slots=True)
class QueueCounts:
    """Jobs per state in one queue at one moment: the live counts exact, the finished ones exact
    up to 10,000, past that maybe estimated by PostgreSQL's statistics, never below 10,001."""

    queue: str
    ready: int
    delayed: int
    running: int
    expired: int
    dead_letter: int
    completed: int
    oldest_ready_due_ms: int | None = None
    """When the oldest job that is due now became due (ms since the epoch), if any."""
    cancelled: int = 0
    held: int = 0
    """Chain steps and batch callbacks waiting for their release (not counted as delayed)."""


@dataclass(frozen=True, slots=True)
class PausedQueue:
    """A queue paused at ``paused_at`` (ms): workers claim none of its jobs until resumed."""

    queue: str
    paused_at: int


@dataclass(frozen=True, slots=True)
class ScheduleState:
    """What the database holds of one schedule: the latest slot a scheduler handled
    (enqueued, or passed over as its missed policy says), and when it was paused (ms; ``None``
    while it runs). A schedule without a row has handled no slot and is not paused."""

    name: str
    last_slot_at: int | None
    paused_at: int | None


#: The states ``caravel status`` and the dashboard show: a READY job is ``ready`` once due and
#: ``delayed`` before; a RUNNING one is ``running`` while its lease lasts and ``expired`` from the
#: moment it ends (as :meth:`Store.queue_counts` counts them).
SHOWN_STATES: tuple[ShownState, ...] = get_args(ShownState)


def shown_state(state: str, due_at: int, lease_expires_at: int | None, now: int) -> ShownState:
    """The :data:`ShownState` of a job stored in ``state`` at ``now``, for stores that judge it
    in Python rather than in SQL: due at ``now`` is ready, a lease ending at ``now`` expired,
    and a job due at :data:`~caravel.limits.HELD_DUE_AT` is held (waiting for a release)."""
    if state == JobState.READY.value:
        if due_at <= now:
            return "ready"
        return "held" if due_at >= HELD_DUE_AT else "delayed"
    if state == JobState.RUNNING.value:
        return "running" if lease_expires_at is not None and lease_expires_at > now else "expired"
    finished: dict[str, ShownState] = {"dead_letter": "dead_letter", "cancelled": "cancelled"}
    return finished.get(state, "completed")


@dataclass(frozen=True, slots=True)
class JobFilter:
    """Which jobs a listing returns (all given fields must match)."""

    queue: str | None = None
    tenant_id: str | None = None
    state: JobState | None = None
    job_type: str | None = None
    limit: int = 50
    offset: int = 0
    """How many matching jobs to skip first (pagination)."""
    oldest_first: bool = False
    """List by creation time ascending instead of newest first."""
    shown: ShownState | None = None
    """One of the states the operator tools show, judged at ``now``: see :data:`ShownState`."""
    now: int = 0
    tag: str | None = None
    """Only jobs carrying this tag (exactly: a tag never matches inside another)."""
    batch_id: UUID | None = None
    """Only the members of this batch."""


@dataclass(frozen=True, slots=True)
class ThroughputQuery:
    """Jobs that finished at or after ``since`` and before ``until``, counted per queue (or only
    ``queue``) in ``bucket_ms``-long buckets starting at ``since``."""

    queue: str | None
    since: int
    until: int
    bucket_ms: int


@dataclass(frozen=True, slots=True)
class ThroughputBucket:
    """How many jobs of one queue finished in one time bucket: completed, and moved to dead
    letter. ``start`` is the bucket's first millisecond since the epoch."""

    queue: str
    start: int
    completed: int
    dead_lettered: int


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    """A worker process as it registered itself, with its last heartbeat."""

    id: UUID
    host: str
    pid: int
    queues: tuple[str, ...]
    concurrency: int
    started_at: int
    heartbeat_at: int
    in_flight: int
    stopped_at: int | None = None


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A worker saying it is alive at ``now`` with ``in_flight`` handlers running, or, with
    ``stopped``, that it shut down normally."""

    worker_id: UUID
    now: int
    in_flight: int
    stopped: bool = False


@dataclass(frozen=True, slots=True)
class SignalQuery:
    """What one autoscaling read covers at ``now``: jobs finished at or after
    ``finished_since`` (and not after ``now``), and workers heard from at or after
    ``seen_since`` that have not stopped; every queue, or only ``queue``."""

    queue: str | None
    now: int
    finished_since: int
    seen_since: int


@dataclass(frozen=True, slots=True)
class QueueSignal:
    """One queue as an autoscaler sees it at one moment: ``ready`` jobs due now (neither
    delayed nor held), ``running`` jobs with a live lease, when the oldest due job became due
    (``None`` when none is), ``finished`` jobs (completed or dead-lettered) in the query's
    window, and the ``workers`` serving the queue that were heard from in its window.
    ``limited``: whether the queue has a limits row, so that its usage is worth reading (not
    compared: it says where to look next, not what the queue holds)."""

    queue: str
    ready: int
    running: int
    oldest_ready_due_ms: int | None
    finished: int
    workers: int
    limited: bool = field(default=False, compare=False)
