"""Queue configuration, validated once at construction.

Every rule below raises :class:`~caravel.errors.OptionsError` naming the field and its allowed
range; there is no later, partial failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from caravel.errors import OptionsError

__all__ = ["QueueOptions", "WorkerOptions"]

KIB = 1024
MIB = 1024 * KIB

MIN_ATTEMPTS, MAX_ATTEMPTS = 1, 100
MIN_LEASE, MAX_LEASE = timedelta(seconds=1), timedelta(hours=1)
MIN_RENEWAL = timedelta(milliseconds=100)
MAX_LEASE_LIFETIME = timedelta(days=7)
MAX_PAYLOAD_LIMIT = 1 * MIB


def _require_range(
    field: str, value: timedelta, low: timedelta, high: timedelta, rule: str
) -> None:
    if not (low <= value <= high):
        raise OptionsError(field, rule)


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
    """

    max_attempts: int = 3
    max_payload_bytes: int = 64 * KIB
    lease_duration: timedelta = timedelta(minutes=5)
    retry_delay: timedelta = timedelta(seconds=5)
    max_retry_delay: timedelta = timedelta(minutes=5)
    lease_renewal_interval: timedelta | None = None
    max_lease_lifetime: timedelta = timedelta(hours=1)

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int):
            raise OptionsError("max_attempts", "must be an integer from 1 to 100")
        if not (MIN_ATTEMPTS <= self.max_attempts <= MAX_ATTEMPTS):
            raise OptionsError("max_attempts", "must be from 1 to 100")
        if isinstance(self.max_payload_bytes, bool) or not isinstance(self.max_payload_bytes, int):
            raise OptionsError("max_payload_bytes", "must be an integer from 1 to 1048576")
        if not (1 <= self.max_payload_bytes <= MAX_PAYLOAD_LIMIT):
            raise OptionsError("max_payload_bytes", "must be from 1 to 1048576 (1 MiB)")
        for name in ("lease_duration", "retry_delay", "max_retry_delay", "max_lease_lifetime"):
            if not isinstance(getattr(self, name), timedelta):
                raise OptionsError(name, "must be a datetime.timedelta")
        _require_range(
            "lease_duration",
            self.lease_duration,
            MIN_LEASE,
            MAX_LEASE,
            "must be from 1 second to 1 hour",
        )
        if self.retry_delay <= timedelta(0):
            raise OptionsError("retry_delay", "must be greater than zero")
        if self.max_retry_delay < self.retry_delay:
            raise OptionsError("max_retry_delay", "must be at least retry_delay")
        if self.lease_renewal_interval is not None:
            if not isinstance(self.lease_renewal_interval, timedelta):
                raise OptionsError("lease_renewal_interval", "must be a datetime.timedelta or None")
            _require_range(
                "lease_renewal_interval",
                self.lease_renewal_interval,
                MIN_RENEWAL,
                self.lease_duration / 2,
                "must be at least 100 milliseconds and at most half of lease_duration",
            )
        _require_range(
            "max_lease_lifetime",
            self.max_lease_lifetime,
            self.lease_duration,
            MAX_LEASE_LIFETIME,
            "must be from lease_duration to 7 days",
        )

    def retry_backoff(self, attempt: int) -> timedelta:
        """The delay before the next attempt after attempt number ``attempt`` (1-based) failed:
        ``retry_delay * 2 ** (attempt - 1)``, capped at ``max_retry_delay``. Computed in whole
        microseconds with Python integers, so no attempt number can overflow it."""
        exponent = max(0, attempt - 1)
        micro = timedelta(microseconds=1)
        base, cap = self.retry_delay // micro, self.max_retry_delay // micro
        return timedelta(microseconds=min(base << min(exponent, 128), cap))


MAX_CONCURRENCY = 1024


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerOptions:
    """How a continuous worker runs.

    Attributes:
        concurrency: handlers running at once in this process (1 to 1024, default 1: the
            sequential worker). Synchronous handlers get one thread each.
        poll_interval: the longest wait between looks at the queue while idle (10 ms to 60 s,
            default 1 s). On PostgreSQL an enqueue wakes idle workers at once and polling is only
            the fallback; on SQLite the worker starts at ``min_poll_interval`` after finding work
            and backs off to this while idle.
        min_poll_interval: the shortest idle wait (1 ms to ``poll_interval``, default 50 ms).
        shutdown_grace: after a stop request, how long in-flight handlers may run to completion
            and be acknowledged before they are cancelled (0 to 1 hour, default 30 s).
        heartbeat_interval: how often the worker records that it is alive in the worker
            registry (``caravel workers``, the dashboard); 1 second to 5 minutes, default 10 s.
        queue_metrics_interval: when set (1 second to 1 hour), this worker reads the queue
            counts at that interval and publishes them as the ``caravel.queue.*`` gauges. Turn it
            on in one process per deployment, not in every worker. ``None`` (default) is off.
    """

    concurrency: int = 1
    poll_interval: timedelta = timedelta(seconds=1)
    min_poll_interval: timedelta = timedelta(milliseconds=50)
    shutdown_grace: timedelta = timedelta(seconds=30)
    queue_metrics_interval: timedelta | None = None
    heartbeat_interval: timedelta = timedelta(seconds=10)

    def __post_init__(self) -> None:
        if isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int):
            raise OptionsError("concurrency", "must be an integer from 1 to 1024")
        if not (1 <= self.concurrency <= MAX_CONCURRENCY):
            raise OptionsError("concurrency", "must be from 1 to 1024")
        for name in ("poll_interval", "min_poll_interval", "shutdown_grace"):
            if not isinstance(getattr(self, name), timedelta):
                raise OptionsError(name, "must be a datetime.timedelta")
        _require_range(
            "poll_interval",
            self.poll_interval,
            timedelta(milliseconds=10),
            timedelta(seconds=60),
            "must be from 10 milliseconds to 60 seconds",
        )
        _require_range(
            "min_poll_interval",
            self.min_poll_interval,
            timedelta(milliseconds=1),
            self.poll_interval,
            "must be from 1 millisecond to poll_interval",
        )
        _require_range(
            "shutdown_grace",
            self.shutdown_grace,
            timedelta(0),
            timedelta(hours=1),
            "must be from 0 to 1 hour",
        )
        if not isinstance(self.heartbeat_interval, timedelta):
            raise OptionsError("heartbeat_interval", "must be a datetime.timedelta")
        _require_range(
            "heartbeat_interval",
            self.heartbeat_interval,
            timedelta(seconds=1),
            timedelta(minutes=5),
            "must be from 1 second to 5 minutes",
        )
        if self.queue_metrics_interval is not None:
            if not isinstance(self.queue_metrics_interval, timedelta):
                raise OptionsError("queue_metrics_interval", "must be a datetime.timedelta or None")
            _require_range(
                "queue_metrics_interval",
                self.queue_metrics_interval,
                timedelta(seconds=1),
                timedelta(hours=1),
                "must be from 1 second to 1 hour",
            )
