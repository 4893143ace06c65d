"""Queue configuration, validated once at construction.

Every rule below raises :class:`~caravel.errors.OptionsError` naming the field and its allowed
range; there is no later, partial failure.
"""

from __future__ import annotations

import dataclasses
import inspect
import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING

from caravel.errors import OptionsError
from caravel.limits import (
    DEFAULT_ATTEMPT_HISTORY,
    MAX_ATTEMPT_HISTORY,
    MAX_ATTEMPTS,
    MAX_PAYLOAD_LIMIT,
    MAX_RESULT_LIMIT,
)
from caravel.retention import Retention
from caravel.retry import exponential_backoff
from caravel.validation import check_duration, check_int

if TYPE_CHECKING:
    from caravel.details import Redactor
    from caravel.hooks import DeadLetterHook, StuckHook

__all__ = ["QueueOptions", "RetryPolicy", "WorkerOptions"]

KIB = 1024

MIN_LEASE, MAX_LEASE = timedelta(seconds=1), timedelta(hours=1)
MIN_RENEWAL = timedelta(milliseconds=100)
MAX_LEASE_LIFETIME = timedelta(days=7)
#: Longer than any real delay, so the only upper bound is "it is a timedelta".
_UNBOUNDED = timedelta.max


def _int(field: str, value: object, low: int, high: int) -> int:
    return check_int(field, value, low, high, error=OptionsError)


def _duration(field: str, value: object, low: timedelta, high: timedelta, rule: str) -> None:
    check_duration(field, value, low, high, rule, error=OptionsError)


def _check_function(field: str, value: object, rule: str) -> None:
    """``value`` must be callable with one positional argument (what it is given)."""
    if not callable(value):
        raise OptionsError(field, rule)
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):  # some builtins have none to read: called as given
        return
    try:
        signature.bind(object())
    except TypeError:
        raise OptionsError(field, rule) from None


def _check_redactor(redactor: object) -> None:
    """A redactor must take the exception as its one argument; ``str`` and ``repr`` would keep
    the very message a redactor is there to leave out."""
    if redactor is str or redactor is repr:
        raise OptionsError("redactor", "must not be str or repr: they keep the exception's message")
    rule = "must be a function taking the exception and returning a string or None"
    _check_function("redactor", redactor, rule)


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueOptions:
    """How jobs are retried and leased.

    Attributes:
        max_attempts: total attempts per job, including the first (1 to 100, default 3).
        max_payload_bytes: largest serialized payload in UTF-8 bytes (1 to 1 MiB, default 64 KiB).
        lease_duration: how long one claim owns a job (1 second to 1 hour, default 5 minutes).
        retry_delay: backoff after the first failure; it doubles per attempt (default 5 seconds).
        max_retry_delay: the backoff never exceeds this (at least ``retry_delay``, default
            5 minutes).
        lease_renewal_interval: opt-in automatic renewal while a handler runs; at least 100 ms
            and at most half the lease duration. ``None`` (the default) disables renewal.
        max_lease_lifetime: how long one claim may be renewed for, from its start (between the
            lease duration and 7 days, default 1 hour).
        max_result_bytes: largest handler result stored, as JSON in UTF-8 bytes (1 to 1 MiB,
            default 64 KiB); a larger one dead-letters the job as ``ResultTooLarge``.
    """

    max_attempts: int = 3
    max_payload_bytes: int = 64 * KIB
    lease_duration: timedelta = timedelta(minutes=5)
    retry_delay: timedelta = timedelta(seconds=5)
    max_retry_delay: timedelta = timedelta(minutes=5)
    lease_renewal_interval: timedelta | None = None
    max_lease_lifetime: timedelta = timedelta(hours=1)
    max_result_bytes: int = 64 * KIB

    def __post_init__(self) -> None:
        _int("max_attempts", self.max_attempts, 1, MAX_ATTEMPTS)
        _int("max_result_bytes", self.max_result_bytes, 1, MAX_RESULT_LIMIT)
        _int("max_payload_bytes", self.max_payload_bytes, 1, MAX_PAYLOAD_LIMIT)
        _duration(
            "lease_duration",
            self.lease_duration,
            MIN_LEASE,
            MAX_LEASE,
            "must be from 1 second to 1 hour",
        )
        tick = timedelta(microseconds=1)
        _duration("retry_delay", self.retry_delay, tick, _UNBOUNDED, "must be greater than zero")
        _duration(
            "max_retry_delay",
            self.max_retry_delay,
            self.retry_delay,
            _UNBOUNDED,
            "must be at least retry_delay",
        )
        if self.lease_renewal_interval is not None:
            _duration(
                "lease_renewal_interval",
                self.lease_renewal_interval,
                MIN_RENEWAL,
                self.lease_duration / 2,
                "must be at least 100 milliseconds and at most half of lease_duration",
            )
        _duration(
            "max_lease_lifetime",
            self.max_lease_lifetime,
            self.lease_duration,
            MAX_LEASE_LIFETIME,
            "must be from lease_duration to 7 days",
        )

    def retry_backoff(self, attempt: int) -> timedelta:
        """The delay before the next attempt after attempt number ``attempt`` (1-based) failed:
        ``retry_delay * 2 ** (attempt - 1)``, capped at ``max_retry_delay``."""
        return exponential_backoff(self.retry_delay, self.max_retry_delay, attempt)


_RANDOM = random.Random()


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """How one job type retries, overriding the queue's :class:`~caravel.QueueOptions` where a
    field is set (``registry.register(..., retry=RetryPolicy(...))``). Checked when
    constructed, with the queue options' rules.

    Attributes:
        max_attempts: total attempts of a job of this type (1 to 100), stored with the job when
            it is enqueued; a ``DispatchOptions.max_attempts`` still wins. ``None``: the queue's.
        base_delay: backoff after the first failure, doubling per attempt (greater than zero).
        max_delay: the backoff never exceeds this (at least ``base_delay``). ``base_delay``
            and ``max_delay`` are given together or not at all (then the queue's are used), so
            no combination with the queue's values can be out of order.
        jitter: from 0 to 1 (default 0): each delay is shortened by a random fraction of at most
            this much, so jobs that failed together do not all retry in the same instant.
    """

    max_attempts: int | None = None
    base_delay: timedelta | None = None
    max_delay: timedelta | None = None
    jitter: float = 0.0

    def __post_init__(self) -> None:
        if self.max_attempts is not None:
            check_int("max_attempts", self.max_attempts, 1, MAX_ATTEMPTS, error=OptionsError)
        if (self.base_delay is None) != (self.max_delay is None):
            raise OptionsError("max_delay", "must be given together with base_delay")
        if self.base_delay is not None and self.max_delay is not None:
            tick = timedelta(microseconds=1)
            check_duration(
                "base_delay",
                self.base_delay,
                tick,
                _UNBOUNDED,
                "must be greater than zero",
                error=OptionsError,
            )
            check_duration(
                "max_delay",
                self.max_delay,
                self.base_delay,
                _UNBOUNDED,
                "must be at least base_delay",
                error=OptionsError,
            )
        jitter = self.jitter
        if isinstance(jitter, bool) or not isinstance(jitter, int | float):
            raise OptionsError("jitter", "must be a number from 0 to 1")
        if not 0.0 <= jitter <= 1.0:  # also refuses NaN
            raise OptionsError("jitter", "must be a number from 0 to 1")

    def backoff(self, attempt: int, base: timedelta, cap: timedelta) -> timedelta:
        """The delay after failed attempt ``attempt``: this policy's base and cap, or the
        queue's ``base`` and ``cap`` when it has none, less the jitter."""
        if self.base_delay is not None and self.max_delay is not None:
            base, cap = self.base_delay, self.max_delay
        delay = exponential_backoff(base, cap, attempt)
        if self.jitter:
            delay -= delay * (self.jitter * _RANDOM.random())
        return delay


MAX_CONCURRENCY = 1024
_POLL_RULE = "must be from 10 milliseconds to 60 seconds"


def _poll_intervals(given: object) -> Mapping[str, timedelta]:
    """``poll_intervals`` checked once, each value as a ``timedelta``, in a read-only mapping."""
    if not isinstance(given, Mapping):
        raise OptionsError("poll_intervals", "must be a mapping of queue names to intervals")
    checked: dict[str, timedelta] = {}
    for queue, value in given.items():
        if not isinstance(queue, str) or not queue:
            raise OptionsError("poll_intervals", "queue names must be non-empty strings")
        if isinstance(value, bool) or not isinstance(value, int | float | timedelta):
            raise OptionsError(
                "poll_intervals", f"for queue {queue} {_POLL_RULE} (seconds or a timedelta)"
            )
        try:
            interval = value if isinstance(value, timedelta) else timedelta(seconds=value)
        except (ValueError, OverflowError):  # NaN, infinity, out of timedelta's range
            raise OptionsError("poll_intervals", f"for queue {queue} {_POLL_RULE}") from None
        if not timedelta(milliseconds=10) <= interval <= timedelta(seconds=60):
            raise OptionsError("poll_intervals", f"for queue {queue} {_POLL_RULE}")
        checked[queue] = interval
    return MappingProxyType(checked)


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerOptions:
    """How a continuous worker runs.

    Attributes:
        concurrency: handlers running at once in this process (1 to 1024, default 1: the
            sequential worker). Synchronous handlers get one thread each.
        poll_interval: the longest wait between looks at the queue while idle (10 ms to 60 s,
            default 1 s). An enqueue wakes idle workers at once and polling is only the fallback
            (PostgreSQL's NOTIFY, the sockets beside a SQLite file); where a SQLite queue has no
            such sockets the worker starts at ``min_poll_interval`` after finding work and backs
            off to this while idle.
        min_poll_interval: the shortest idle wait (1 ms to ``poll_interval``, default 50 ms).
        polling_only: never LISTEN: the worker finds jobs by polling each queue at its own
            interval (``poll_intervals``, else ``poll_interval``), and cancels and pauses at
            ``poll_interval``. For a database reached through a pooler in transaction mode
            (PgBouncer's ``pool_mode = transaction``), where LISTEN cannot work. Jobs enqueued
            in the worker's own process still wake it at once. Off by default.
        poll_intervals: per queue, the longest idle wait between looks at it, in seconds or
            as a ``timedelta`` (10 ms to 60 s each), overriding ``poll_interval`` for that
            queue: ``{"emails": 0.5, "reports": 30}``. Empty by default.
        shutdown_grace: after a stop request, how long in-flight handlers may run to completion
            and be acknowledged before they are cancelled (0 to 1 hour, default 30 s).
        outage_window: how long the worker lives through its database being unreachable (0 to
            1 hour, default 30 s). A claim, acknowledgement, lease renewal or read of the paused
            set that fails because the connection was lost or refused, the server is shutting
            down or starting, or it is read-only (a failover under way) is tried again after a
            pause (100 ms doubling to 2 s, jittered) while handlers in flight keep running under
            their leases; once an operation succeeds the worker carries on, reconnected. An
            outage that lasts longer, or any other database error, stops the worker as
            :meth:`~caravel.QueueWorker.run` documents (the command line exits 1). 0 stops at
            the first failure.
        heartbeat_interval: how often the worker records that it is alive in the worker
            registry (``caravel workers``, the dashboard); 1 second to 5 minutes, default 10 s.
        queue_metrics_interval: when set (1 second to 1 hour), this worker reads the queue
            counts at that interval and publishes them as the ``caravel.queue.*`` gauges. Turn it
            on in one process per deployment, not in every worker. ``None`` (default) is off.
        log_tracebacks: for development: a failed handler's log line carries its traceback
            (which may quote the exception's message, and through it job data). Only the
            worker's own log gets it, never the queue's rows or metrics. Off by default.
        durable_acks: whether recording a job's outcome (completed, failed, dead letter) waits
            until the database has it on disk. Off by default: the outcome's commit returns
            before it is synced (PostgreSQL ``synchronous_commit = off`` for that transaction,
            SQLite ``synchronous = NORMAL``), so a crash of the database server or machine in
            that moment loses the outcome and the job runs again once its lease ends, which
            at-least-once delivery allows. Enqueues and claims are always durable.
        retention: when set, this worker also prunes finished jobs under this
            :class:`~caravel.Retention` every ``prune_interval``, in bounded batches (one pruner
            at a time across workers). ``None`` (default): nothing is ever deleted.
        prune_interval: how often that happens (1 minute to 1 day, default 1 hour).
        summary_interval: how often :meth:`~caravel.QueueWorker.run` logs, at INFO, one line
            per queue counting the jobs its handlers finished since the last one (completed,
            failed, dead-lettered, snoozed, cancelled, abandoned); nothing when none finished,
            and a last summary when it stops. 1 second to 1 hour, default 10 s; ``None`` turns
            it off. Each completed job has a line of its own only at DEBUG.
        timeout_grace: how long a handler whose execution timeout passed may take to stop
            once asked (``ctx.cancelled`` is set, an async handler is cancelled) before it is
            reported stuck: a WARNING log line and the ``caravel.jobs.stuck`` metric. From then
            on its lease is no longer renewed; when the lease ends the attempt is recorded as
            ``TimedOut`` and the job may run again (a synchronous handler's thread cannot be
            stopped and runs on until it returns). 1 second to 1 hour, default 30 s.
        schedules: whether :meth:`~caravel.QueueWorker.run` also enqueues the slots of the
            registry's schedules (:class:`~caravel.Schedule`). On by default: every worker may
            run the scheduler, since each slot's idempotency key keeps one job per slot however
            many race. ``False`` leaves it to other processes.
        redactor: a function of yours that turns the exception a failed attempt ended with into
            a text that is safe to keep for operators, or into ``None`` (nothing); the default
            ``None`` keeps no text. Called in the worker's event loop, so keep it quick and free
            of I/O. What it returns is kept as the attempt's detail, as a
            :class:`~caravel.JobFailed`'s ``safe_detail`` is (which, when given, wins: the
            redactor is not asked). One that raises, or returns neither a string nor ``None``,
            gives no detail and a WARNING log line naming the types involved; the worker goes
            on. Make it map exception types to fixed texts, or read fields you know are safe
            (an HTTP status code); never return ``str(exc)``, which may quote job data.
        progress_interval: the longest a running job's report (``ctx.progress``,
            ``ctx.set_meta``) waits to be written: each job's first report is written at once,
            later ones at most once per interval, the latest values kept, and the last one
            always before the job's outcome. 100 milliseconds to 1 hour, default 1 s.
        attempt_history: how many attempt records each job keeps (1 to 100, default 20): every
            outcome this worker records, and every expired lease it takes over, writes one; the
            records of claims older than a job's last ``attempt_history`` are deleted as it
            records a new one, and counted in :attr:`JobStatus.attempts_dropped
            <caravel.JobStatus.attempts_dropped>` (see
            :meth:`~caravel.DatabaseQueue.get_attempts`).
        on_dead_letter: a function or async function of yours, called with a
            :class:`~caravel.hooks.DeadLetterEvent` after this worker committed a job's dead
            letter (its last attempt failed or timed out, or it was discarded); never for a
            write a newer lease refused, nor for a job dead-lettered by a claim because its last
            lease expired (its attempt record says ``lease_expired``). ``None`` (default): none.
        on_stuck: likewise, called with a :class:`~caravel.hooks.StuckEvent` when a handler is
            reported stuck (see ``timeout_grace``). ``None`` (default): none.
        hook_timeout: how long one hook call may take (100 milliseconds to 5 minutes, default
            10 s). Hooks run one at a time in a task of their own (a synchronous one in a thread
            of its own), never on the path that records outcomes; one that raises or takes
            longer is logged at WARNING by its exception's class (``worker hook failed``) and
            the worker goes on. At most 1,000 calls wait their turn; more are dropped, logged. A
            stopping worker waits one ``hook_timeout`` in all for the calls still queued.
    """

    concurrency: int = 1
    poll_interval: timedelta = timedelta(seconds=1)
    min_poll_interval: timedelta = timedelta(milliseconds=50)
    polling_only: bool = False
    poll_intervals: Mapping[str, timedelta | float] = dataclasses.field(
        default_factory=lambda: MappingProxyType({})
    )
    shutdown_grace: timedelta = timedelta(seconds=30)
    outage_window: timedelta = timedelta(seconds=30)
    queue_metrics_interval: timedelta | None = None
    heartbeat_interval: timedelta = timedelta(seconds=10)
    log_tracebacks: bool = False
    durable_acks: bool = False
    retention: Retention | None = None
    prune_interval: timedelta = timedelta(hours=1)
    schedules: bool = True
    summary_interval: timedelta | None = timedelta(seconds=10)
    timeout_grace: timedelta = timedelta(seconds=30)
    redactor: Redactor | None = None
    progress_interval: timedelta = timedelta(seconds=1)
    attempt_history: int = DEFAULT_ATTEMPT_HISTORY
    on_dead_letter: DeadLetterHook | None = None
    on_stuck: StuckHook | None = None
    hook_timeout: timedelta = timedelta(seconds=10)

    def poll_interval_for(self, queue: str) -> timedelta:
        """The longest idle wait between looks at ``queue``."""
        interval = self.poll_intervals.get(queue, self.poll_interval)
        return interval if isinstance(interval, timedelta) else timedelta(seconds=interval)

    def __post_init__(self) -> None:
        _int("attempt_history", self.attempt_history, 1, MAX_ATTEMPT_HISTORY)
        if self.redactor is not None:
            _check_redactor(self.redactor)
        for hook in ("on_dead_letter", "on_stuck"):
            function = getattr(self, hook)
            if function is not None:
                _check_function(hook, function, "must be None or a function taking one event")
        _duration(
            "hook_timeout",
            self.hook_timeout,
            timedelta(milliseconds=100),
            timedelta(minutes=5),
            "must be from 100 milliseconds to 5 minutes",
        )
        if not isinstance(self.schedules, bool):
            raise OptionsError("schedules", "must be True or False")
        if self.retention is not None and not isinstance(self.retention, Retention):
            raise OptionsError("retention", "must be None or a caravel.Retention")
        _duration(
            "prune_interval",
            self.prune_interval,
            timedelta(minutes=1),
            timedelta(days=1),
            "must be from 1 minute to 1 day",
        )
        if not isinstance(self.log_tracebacks, bool):
            raise OptionsError("log_tracebacks", "must be True or False")
        if not isinstance(self.durable_acks, bool):
            raise OptionsError("durable_acks", "must be True or False")
        _int("concurrency", self.concurrency, 1, MAX_CONCURRENCY)
        _duration(
            "poll_interval",
            self.poll_interval,
            timedelta(milliseconds=10),
            timedelta(seconds=60),
            "must be from 10 milliseconds to 60 seconds",
        )
        _duration(
            "min_poll_interval",
            self.min_poll_interval,
            timedelta(milliseconds=1),
            self.poll_interval,
            "must be from 1 millisecond to poll_interval",
        )
        if not isinstance(self.polling_only, bool):
            raise OptionsError("polling_only", "must be True or False")
        object.__setattr__(self, "poll_intervals", _poll_intervals(self.poll_intervals))
        _duration(
            "shutdown_grace",
            self.shutdown_grace,
            timedelta(0),
            timedelta(hours=1),
            "must be from 0 to 1 hour",
        )
        _duration(
            "outage_window",
            self.outage_window,
            timedelta(0),
            timedelta(hours=1),
            "must be from 0 to 1 hour",
        )
        _duration(
            "timeout_grace",
            self.timeout_grace,
            timedelta(seconds=1),
            timedelta(hours=1),
            "must be from 1 second to 1 hour",
        )
        _duration(
            "progress_interval",
            self.progress_interval,
            timedelta(milliseconds=100),
            timedelta(hours=1),
            "must be from 100 milliseconds to 1 hour",
        )
        _duration(
            "heartbeat_interval",
            self.heartbeat_interval,
            timedelta(seconds=1),
            timedelta(minutes=5),
            "must be from 1 second to 5 minutes",
        )
        # Both optional, from 1 second to 1 hour; None turns them off.
        for field in ("summary_interval", "queue_metrics_interval"):
            value = getattr(self, field)
            if value is not None:
                _duration(
                    field,
                    value,
                    timedelta(seconds=1),
                    timedelta(hours=1),
                    "must be from 1 second to 1 hour, or off (None)",
                )
