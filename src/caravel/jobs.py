"""The values that cross the public API: how to dispatch a job, what enqueue returns, a job's
status, and the lease a worker holds while it runs one."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any, Literal
from uuid import UUID

from caravel.clock import from_ms
from caravel.errors import ValidationError
from caravel.limits import MAX_DELAY_DAYS, MAX_PRIORITY, MIN_PRIORITY
from caravel.pending import DEFAULT_MAX_DEBOUNCE, check_pending
from caravel.progress import JobProgress
from caravel.tags import check_tags
from caravel.validation import (
    check_duration,
    check_identifier,
    check_int,
    check_max_attempts,
    check_not_before,
    check_queue_name,
    check_timeout,
)

__all__ = [
    "DEFAULT_TENANT",
    "CancelOutcome",
    "ClaimedJob",
    "DispatchOptions",
    "EnqueueResult",
    "FailureCategory",
    "JobState",
    "JobStatus",
    "Lease",
    "ShownState",
    "WorkerInfo",
]


#: The tenant of a job enqueued without one, and the tenant every lookup without one matches
#: (exactly, like any other tenant). For single-tenant applications: a multi-tenant application
#: passes its verified caller's tenant everywhere and never uses this value for a real tenant.
DEFAULT_TENANT = "default"


#: The states operator tools show: the stored ones, with a ready job split into ``ready`` (due
#: now), ``delayed`` (due later: a delay, a ``not_before`` or a retry's backoff) and ``held``
#: (a chain step or batch callback waiting for its release), and a running one into
#: ``running`` (lease live) and ``expired`` (lease ended, claimable again).
ShownState = Literal[
    "ready", "delayed", "held", "running", "expired", "dead_letter", "completed", "cancelled"
]


class JobState(enum.StrEnum):
    """Where a job is in its life. Stored as these exact strings."""

    READY = "ready"
    """Waiting to run; due now or at its due time (``due_at``)."""
    RUNNING = "running"
    """Claimed by a worker under a lease. Claimable again once the lease expires."""
    COMPLETED = "completed"
    """The handler succeeded and the lease holder acknowledged it."""
    DEAD_LETTER = "dead_letter"
    """Every attempt failed or its last lease expired; it waits for a deliberate replay."""
    CANCELLED = "cancelled"
    """An operator cancelled it; it is never claimed again."""
    PRUNED = "pruned"
    """Retention removed it; what is left is the tombstone of its idempotency key."""


class CancelOutcome(enum.StrEnum):
    """What asking to cancel one job did."""

    CANCELLED = "cancelled"
    """It was waiting (ready, delayed or due for a retry): cancelled now, never claimed."""
    CANCELLED_RUNNING = "cancelled_running"
    """It was running: cancelled now, and its lease fenced, so whatever its handler still
    reports changes nothing; the worker holding it is told and cancels the handler."""
    ALREADY_FINISHED = "already_finished"
    """It had already completed, been dead-lettered or cancelled: nothing changed."""
    NOT_FOUND = "not_found"
    """No job has this id in this queue for this exact tenant."""


class FailureCategory(enum.StrEnum):
    """Why an attempt failed. Only these short words are stored, never exception messages."""

    HANDLER_FAILED = "HandlerFailed"
    """The handler (or the job's scope) raised an exception."""
    HANDLER_EXITED = "HandlerExited"
    """The handler raised ``SystemExit`` (called ``sys.exit()`` or ``exit()``): a failed
    attempt like any other, retried by the same policy; the worker carries on."""
    INVALID_PAYLOAD = "InvalidPayload"
    UNKNOWN_JOB_TYPE = "UnknownJobType"
    LEASE_EXPIRED = "LeaseExpired"
    RESULT_TOO_LARGE = "ResultTooLarge"
    """The handler returned a result larger than ``max_result_bytes`` (dead-letters at once)."""
    RESULT_NOT_SERIALIZABLE = "ResultNotSerializable"
    """The handler returned a value JSON cannot hold (dead-letters at once)."""
    DISCARDED = "Discarded"
    """The handler raised :class:`~caravel.Discard` without a category of its own."""
    SNOOZE_LIMIT = "SnoozeLimit"
    """The handler snoozed once more after snoozing ``MAX_SNOOZES`` times."""
    RELEASE_LOST = "ReleaseLost"
    """A held chain step or batch callback that a forced schema downgrade below 0009 (which
    removes what releases held jobs) dead-lettered; it never ran. Replay runs it on its own."""
    TIMED_OUT = "TimedOut"
    """The attempt ran longer than its execution timeout (``register(timeout=...)`` or
    ``DispatchOptions(timeout=...)``): its handler was asked to stop, and the attempt failed,
    retried by the job type's policy like any other failure. Not a lease expiry."""
    COMPLETION_NOT_COMMITTED = "CompletionNotCommitted"
    """The handler completed its job in its own transaction (``ctx.complete_in``) and
    returned, but that transaction never committed (it rolled back, or was left open): the
    attempt's effects are gone with it, and it is retried by the job type's policy."""


@dataclass(frozen=True, kw_only=True, slots=True, init=False)
class DispatchOptions:
    """Where and how a job is dispatched. Checked when constructed.

    Attributes:
        queue: 1 to 64 characters of ``[a-z0-9._-]``.
        tenant_id: the verified caller's tenant; nonblank, at most 128 characters, no control
            characters. Take it from the signed-in user, never from a request body. Left out,
            it is :data:`DEFAULT_TENANT` (``"default"``), for single-tenant applications; an
            explicit ``""`` or ``None`` is refused, never replaced by the default.
        idempotency_key: same rules as ``tenant_id``; with it, a retried submission returns the
            original job. ``None`` means every enqueue creates a new job.
        not_before: an aware datetime; the job never runs earlier (stored to the millisecond,
            rounded up). ``None`` means due now.
        delay: a :class:`~datetime.timedelta` from 0 to 36,500 days: the job is due this long
            after the enqueue (on the queue's clock; rounded up to the millisecond, so never
            early). One or the other of ``not_before`` and ``delay``, not both.
        max_attempts: this job's attempt budget (1 to 100); ``None`` takes the queue default.
        tags: labels for listings and filters, such as ``("billing", "customer:42")``: at most
            16, each 1 to 64 characters of ``[a-z0-9:._-]``; a repeated tag is dropped. A list
            is kept as a tuple. Tags are not payload (an idempotent repeat with other tags
            returns the original job unchanged) and are shown to operators: never put secrets
            in them.
        priority: -100 to 100; ``None`` takes the job type's (``register(priority=...)``),
            else 0. Higher is claimed first among a queue's due jobs,
            and waiting counts too: each point is worth 6 seconds of waiting, so a job of
            priority 100 goes ahead of priority-0 jobs that have waited less than 10 minutes,
            and a job of priority -100 waits at most 20 minutes behind any stream of
            priority-100 work. Equal priorities run in due order. It never makes a delayed job
            run before ``not_before``. Retries and snoozes keep it.
        pending_key: "one pending per key": at most one job of the queue and tenant is pending
            (ready, delayed or retrying) under this key; same rules as ``idempotency_key``, and
            not combined with it. Unlike an idempotency key it frees up once the pending job is
            claimed. ``None`` (the default) means no such rule.
        on_pending: what an enqueue does when a job is pending under ``pending_key``:
            ``"keep"`` (dedupe) returns the pending job unchanged; ``"replace"`` (debounce)
            gives it this call's payload, trace context and due time, but never a due time
            later than its creation plus ``max_debounce``. Only with ``pending_key``.
        max_debounce: with ``on_pending="replace"``, how long after its creation a pending job
            may be pushed back at most (positive, at most 30 days; 10 minutes by default), so a
            steady stream of calls still runs it. Only with ``pending_key``.
        timeout: how long one attempt of this job may run (from 1 millisecond to 7 days), over
            its job type's ``register(timeout=...)``; stored with the job (to the millisecond,
            rounded up). At the timeout the handler is asked to stop and the attempt fails as
            ``TimedOut`` (see the flow control guide). ``None`` (the default): the job type's,
            else no timeout.
        partition_key: the key a per-key concurrency limit of the queue counts this job under
            (see :class:`~caravel.ConcurrencyLimit`); same rules as ``idempotency_key``.
            ``None`` (the default) takes what the job type's ``partition_by`` names: its
            tenant unless the type says a payload field.
    """

    queue: str
    tenant_id: str = DEFAULT_TENANT
    idempotency_key: str | None = None
    not_before: datetime | None = None
    delay: timedelta | None = None
    max_attempts: int | None = None
    tags: tuple[str, ...] = ()
    priority: int | None = None
    pending_key: str | None = None
    on_pending: Literal["keep", "replace"] = "keep"
    max_debounce: timedelta = DEFAULT_MAX_DEBOUNCE
    timeout: timedelta | None = None
    partition_key: str | None = None

    def __init__(
        self,
        *,
        queue: str,
        tenant_id: str = DEFAULT_TENANT,
        idempotency_key: str | None = None,
        not_before: datetime | None = None,
        delay: timedelta | None = None,
        max_attempts: int | None = None,
        tags: tuple[str, ...] = (),
        priority: int | None = None,
        pending_key: str | None = None,
        on_pending: Literal["keep", "replace"] = "keep",
        max_debounce: timedelta = DEFAULT_MAX_DEBOUNCE,
        timeout: timedelta | None = None,
        partition_key: str | None = None,
    ) -> None:
        # The fields' own order and defaults (a test holds them to it). Each slot is set through
        # its descriptor, which is what the generated __init__'s object.__setattr__ (the class
        # is frozen) ends up calling: that lookup per field cost more than all of the checks,
        # and a bulk enqueue makes one of these per job.
        _set_queue(self, queue)
        _set_tenant_id(self, tenant_id)
        _set_idempotency_key(self, idempotency_key)
        _set_not_before(self, not_before)
        _set_delay(self, delay)
        _set_max_attempts(self, max_attempts)
        _set_tags(self, tags)
        _set_priority(self, priority)
        _set_pending_key(self, pending_key)
        _set_on_pending(self, on_pending)
        _set_max_debounce(self, max_debounce)
        _set_timeout(self, timeout)
        _set_partition_key(self, partition_key)
        self.__post_init__()

    def __post_init__(self) -> None:
        check_queue_name(self.queue)
        check_identifier(self.tenant_id, "tenant_id")
        if self.idempotency_key is not None:
            check_identifier(self.idempotency_key, "idempotency_key")
        if self.partition_key is not None:
            check_identifier(self.partition_key, "partition_key")
        if self.not_before is not None:
            check_not_before(self.not_before)
        if self.delay is not None:
            check_duration(
                "delay",
                self.delay,
                timedelta(0),
                timedelta(days=MAX_DELAY_DAYS),
                f"must be from 0 to {MAX_DELAY_DAYS:,} days",
            )
            if self.not_before is not None:
                raise ValidationError(
                    "delay", "give either not_before or delay, not both (delay is relative)"
                )
        if self.max_attempts is not None:
            check_max_attempts(self.max_attempts)
        if self.tags != ():
            # Frozen: the checked, de-duplicated tuple replaces what was given.
            object.__setattr__(self, "tags", check_tags(self.tags))
        if self.priority is not None:
            check_int("priority", self.priority, MIN_PRIORITY, MAX_PRIORITY)
        if (
            self.pending_key is not None
            or self.on_pending != "keep"
            or self.max_debounce != DEFAULT_MAX_DEBOUNCE
        ):
            check_pending(
                self.pending_key, self.idempotency_key, self.on_pending, self.max_debounce
            )
        if self.timeout is not None:
            check_timeout(self.timeout)


(
    _set_queue,
    _set_tenant_id,
    _set_idempotency_key,
    _set_not_before,
    _set_delay,
    _set_max_attempts,
    _set_tags,
    _set_priority,
    _set_pending_key,
    _set_on_pending,
    _set_max_debounce,
    _set_timeout,
    _set_partition_key,
) = (DispatchOptions.__dict__[f.name].__set__ for f in fields(DispatchOptions))


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    """The outcome of an enqueue that committed.

    ``already_enqueued`` is true when the idempotency key matched an existing job with the same
    type and payload, or a job of the same type was pending under the ``pending_key``;
    ``job_id`` is then that job's id. Nothing changed, except with ``on_pending="replace"``:
    then ``replaced`` is true, and the pending job now has this call's payload, trace context
    and (capped) due time.
    """

    job_id: UUID
    already_enqueued: bool
    replaced: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class JobStatus:
    """A job as its tenant may see it. Never carries the payload."""

    job_id: UUID
    queue: str
    tenant_id: str
    job_type: str
    state: JobState
    attempt: int
    max_attempts: int
    due_at: datetime
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    lease_expires_at: datetime | None
    last_failure: str | None
    tags: tuple[str, ...] = ()
    """The labels the job was enqueued with (see :attr:`DispatchOptions.tags`)."""
    error_class: str | None = None
    """The class of the exception a handler of this job last raised (``module.QualName``),
    never its message."""
    snoozes: int = 0
    """How many times the handler snoozed (ran again later without spending an attempt)."""
    priority: int = 0
    """The priority the job was enqueued with (see :attr:`DispatchOptions.priority`)."""
    result: Any = None
    """What the handler returned, decoded from its stored JSON; ``None`` when it returned
    ``None``, has not completed, or the status came from a listing (listings leave results out;
    :meth:`~caravel.DatabaseQueue.get_status` reads it)."""
    pending_key: str | None = None
    """The job's pending key (see :attr:`DispatchOptions.pending_key`), while it holds one: a
    job that returned to ready while another was pending under its key gave it up."""
    chain_id: UUID | None = None
    """The chain this job is a step of (the id of its first step), if any."""
    chain_step: int | None = None
    """Its place in the chain, from 0."""
    batch_id: UUID | None = None
    """The batch this job is a member of, if any."""
    workflow_id: UUID | None = None
    """The workflow this job is a step of, if any (:meth:`QueueInspector.get_workflow
    <caravel.QueueInspector.get_workflow>` reads it)."""
    progress: JobProgress | None = None
    """What its handler last reported with :meth:`JobContext.progress
    <caravel.JobContext.progress>` (``None`` when it never did), kept after the job finishes."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """The metadata its handler set with :meth:`JobContext.set_meta
    <caravel.JobContext.set_meta>` (the last attempt's that set any), kept after the job
    finishes; empty when none was set."""
    attempts_dropped: int = 0
    """How many of the job's oldest attempt records were deleted to keep its history within
    its bound (:attr:`WorkerOptions.attempt_history <caravel.WorkerOptions.attempt_history>`);
    :meth:`~caravel.DatabaseQueue.get_attempts` returns the others."""

    @property
    def held(self) -> bool:
        """Whether the job waits to be released: a chain step whose previous step has not
        completed, or a batch callback whose batch has not finished. Its state is ``ready``
        and its due time the far future (9999-12-31) until the database releases it."""
        return self.state is JobState.READY and self.due_at.year == 9999

    def shown_state(self, now: datetime) -> str:
        """The job's state in the words every operator tool uses (``caravel jobs``, ``caravel
        status``, the dashboard, the inspector's ``shown_state`` filter), judged at ``now``:
        the stored state, except that a ready job not due yet is ``delayed`` (waiting for its
        ``not_before``, its ``delay`` or a retry's backoff), a held one is ``held``, and a
        running job whose lease ended is ``expired``."""
        if self.held:
            return "held"
        if self.state is JobState.READY and self.due_at > now:
            return "delayed"
        expiry = self.lease_expires_at
        if self.state is JobState.RUNNING and expiry is not None and expiry <= now:
            return "expired"
        return self.state.value


@dataclass(frozen=True, slots=True)
class Lease:
    """Proof of one claim. ``token`` and ``nonce`` are its fence: every write after the claim
    must present both. The token counts the job's claims up (the attempt history is keyed by
    it); the nonce is a random number the claim drew, so a claim lost with an asynchronous
    primary and the claim of the same job on the promoted standby, which count to the same
    token, still have different fences (see docs/guides/high-availability.md)."""

    job_id: UUID
    token: int
    expires_at_ms: int
    claimed_at_ms: int
    attempt: int
    max_attempts: int
    nonce: int = 0
    """The claim's random draw; 0 for a lease no claim handed out (it holds nothing)."""

    @property
    def expires_at(self) -> datetime:
        return from_ms(self.expires_at_ms)


@dataclass(frozen=True, kw_only=True, slots=True)
class ClaimedJob:
    """A job a worker now holds: its stored fields and the lease."""

    lease: Lease
    queue: str
    tenant_id: str
    job_type: str
    payload: str
    due_at_ms: int
    trace_context: str | None
    snoozes: int = 0
    priority: int = 0
    upstream: str | None = None
    """What the database handed this job when it released it (JSON): see
    :attr:`~caravel.JobContext.previous_result` and :attr:`~caravel.JobContext.batch`."""
    timeout_ms: int | None = None
    """The job's own execution timeout in ms (``DispatchOptions.timeout``), or ``None``: its
    job type's applies, if it has one."""
    partition_key: str | None = None
    """The job's own partition key (``DispatchOptions.partition_key`` or its type's
    ``partition_by``), or ``None``: its tenant is its key."""

    @property
    def key(self) -> str:
        """The partition key the queue's flow control counts this job under."""
        return self.tenant_id if self.partition_key is None else self.partition_key

    @property
    def job_id(self) -> UUID:
        return self.lease.job_id

    @property
    def attempt(self) -> int:
        return self.lease.attempt


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerInfo:
    """A worker process from the registry. ``state`` is ``running``, ``stopped`` (shut down
    normally) or ``lost`` (no heartbeat for longer than the reader's ``lost_after``)."""

    worker_id: UUID
    host: str
    pid: int
    queues: tuple[str, ...]
    concurrency: int
    started_at: datetime
    heartbeat_at: datetime
    in_flight: int
    state: str
