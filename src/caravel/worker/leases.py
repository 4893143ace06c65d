"""The lease protocol: claim jobs, complete or fail them, renew their leases, and the arithmetic
of lease deadlines and retries.

The worker holds every lease through :class:`Leases`; infrastructure that runs jobs itself can
too (``Leases(queue)``). Every write after a claim presents the lease, and a lease that is no
longer current changes nothing.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol
from uuid import UUID

from caravel.attempts import AttemptOutcome
from caravel.clock import Clock, duration_ms, from_ms
from caravel.details import clean_detail
from caravel.errors import LeaseLostError, ValidationError
from caravel.jobs import ClaimedJob, FailureCategory, Lease
from caravel.limits import DEFAULT_ATTEMPT_HISTORY, MAX_ATTEMPT_HISTORY, MAX_HOST_LENGTH
from caravel.options import QueueOptions, RetryPolicy
from caravel.queue import DatabaseQueue
from caravel.store.protocol import (
    ClaimRequest,
    ClaimSource,
    FailedAttempt,
    Recorder,
    SnoozedAttempt,
    Store,
)
from caravel.validation import check_int, check_queue_name

__all__ = [
    "Acknowledged",
    "Acknowledgement",
    "FailureOutcome",
    "Leases",
    "failed_attempt_outcome",
]

_SOURCES = ("any", "ready", "expired")


@dataclass(frozen=True, slots=True)
class FailureOutcome:
    """What a recorded failure did: the job retries at ``retry_at``, or, when ``retry_at`` is
    ``None``, it used its last attempt and is now a dead letter."""

    retry_at: datetime | None

    @property
    def dead_lettered(self) -> bool:
        return self.retry_at is None


@dataclass(frozen=True, slots=True)
class Acknowledgement:
    """One attempt's end to record under ``lease``: success (``category`` is ``None``) with an
    optional ``result`` (JSON text), a snooze (``snooze_ms``), or a failure ``category``, which
    with ``final`` dead-letters at once; ``error_class`` names the exception behind a failure
    and ``retry`` is the job type's policy for its backoff (``None``: the queue's). ``detail``
    is a failure's safe detail (see :mod:`caravel.details`), kept in its attempt's record once
    cleaned: only ever a text someone chose to expose, never an exception's message.
    ``discarded``: the handler discarded the job (a final failure its attempt record calls
    ``discarded``)."""

    lease: Lease
    category: str | None = None
    result: str | None = None
    snooze_ms: int | None = None
    final: bool = False
    error_class: str | None = None
    retry: RetryPolicy | None = None
    detail: str | None = None
    discarded: bool = False


class Acknowledged(Protocol):
    """What :meth:`Leases.record` reads of each attempt's end: an :class:`Acknowledgement`, or
    the worker's own outcome (which has the same fields, so a batch needs no copy of it)."""

    @property
    def lease(self) -> Lease: ...
    @property
    def category(self) -> str | None: ...
    @property
    def result(self) -> str | None: ...
    @property
    def snooze_ms(self) -> int | None: ...
    @property
    def final(self) -> bool: ...
    @property
    def error_class(self) -> str | None: ...
    @property
    def retry(self) -> RetryPolicy | None: ...
    @property
    def detail(self) -> str | None: ...
    @property
    def discarded(self) -> bool: ...


def failed_attempt_outcome(category: str, *, discarded: bool = False) -> AttemptOutcome:
    """What a failed attempt's record says it ended with."""
    if discarded:
        return AttemptOutcome.DISCARDED
    if category == FailureCategory.TIMED_OUT:
        return AttemptOutcome.TIMED_OUT
    return AttemptOutcome.FAILED


class Leases:
    """Claims, acknowledgements and renewals for the jobs of one :class:`~caravel.DatabaseQueue`
    (its store, its :class:`~caravel.QueueOptions` and its clock).

    ``durable_acks`` makes every recorded outcome wait for the database's disk, as
    :attr:`~caravel.WorkerOptions.durable_acks` describes (off by default).

    Every outcome recorded and every expired lease taken over writes the job's attempt record
    (see :meth:`DatabaseQueue.get_attempts <caravel.DatabaseQueue.get_attempts>`), naming this
    process (its host and pid) and ``worker_id``, the worker registry's id of the worker
    holding these leases (``None`` for none); each job keeps its last ``attempt_history``
    records (1 to 100, default 20, as :attr:`~caravel.WorkerOptions.attempt_history`)."""

    def __init__(
        self,
        queue: DatabaseQueue,
        *,
        durable_acks: bool = False,
        worker_id: UUID | None = None,
        attempt_history: int = DEFAULT_ATTEMPT_HISTORY,
    ) -> None:
        if not isinstance(queue, DatabaseQueue):
            raise ValidationError("queue", "must be a DatabaseQueue")
        if not isinstance(durable_acks, bool):
            raise ValidationError("durable_acks", "must be True or False")
        if worker_id is not None and not isinstance(worker_id, UUID):
            raise ValidationError("worker_id", "must be a UUID or None")
        check_int("attempt_history", attempt_history, 1, MAX_ATTEMPT_HISTORY)
        #: Who this holder records outcomes as (see :class:`~caravel.store.values.Recorder`).
        self.recorder = Recorder(
            worker_id=worker_id,
            host=socket.gethostname()[:MAX_HOST_LENGTH],
            pid=os.getpid(),
            attempt_history=attempt_history,
        )
        self.durable_acks = durable_acks
        self._store: Store = queue.store
        self.options: QueueOptions = queue.options
        self.clock: Clock = queue.clock
        self._lease_ms = duration_ms(self.options.lease_duration)
        self._lifetime_ms = duration_ms(self.options.max_lease_lifetime)

    # ----- claims ----------------------------------------------------------------------------

    async def claim_many(
        self, queue: str, limit: int, *, source: ClaimSource = "any", limited: bool = False
    ) -> list[ClaimedJob]:
        """Lease up to ``limit`` due jobs of ``queue``. Each claim counts as an attempt.

        ``source`` narrows what is taken: ``"ready"`` only waiting jobs, higher priority first
        with each point worth 6 s of waiting (see :attr:`~caravel.DispatchOptions.priority`),
        ``"expired"`` only running jobs whose lease ran out (taking over a crashed worker's
        job), oldest expiry first, ``"any"`` (the default) expired leases first, then waiting
        jobs.

        ``limited`` keeps the queue's stored concurrency limits (see
        :class:`~caravel.ConcurrencyLimit`): the claim takes at most what they leave.
        """
        check_queue_name(queue)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValidationError("limit", "must be a positive integer")
        if source not in _SOURCES:
            raise ValidationError("source", "must be 'any', 'ready' or 'expired'")
        recorder = self.recorder
        while True:
            request = ClaimRequest(
                queue,
                limit,
                self.clock.now_ms(),
                self._lease_ms,
                source,
                limited=limited,
                worker_id=recorder.worker_id,
                attempt_history=recorder.attempt_history,
            )
            batch = await self._store.job_claim_many(request)
            # Jobs dead-lettered on the way (their last lease expired) use up the limit without
            # giving work; look again so a caller never sees "nothing due" while jobs wait.
            if batch.claimed or batch.dead_lettered == 0:
                return batch.claimed

    async def claim(self, queue: str, *, limited: bool = False) -> ClaimedJob | None:
        """Lease the next due job of ``queue``, or return ``None`` when none is due (or, when
        ``limited``, when the queue's concurrency limits leave no room)."""
        claimed = await self.claim_many(queue, 1, limited=limited)
        return claimed[0] if claimed else None

    # ----- outcomes --------------------------------------------------------------------------

    async def complete(self, lease: Lease) -> None:
        """Record success. Raises :class:`~caravel.errors.LeaseLostError`, changing nothing,
        when the lease is no longer current."""
        if lease.job_id not in await self.record_many([(lease, None)]):
            raise LeaseLostError(lease.job_id)

    async def fail(
        self, lease: Lease, category: str, *, detail: str | None = None
    ) -> FailureOutcome:
        """Record a failed attempt under a short category (never an exception message): a
        retry after the backoff for this attempt, or a dead letter after the last. ``detail``
        is a text you chose to expose to operators (see :class:`~caravel.JobFailed`), kept in
        the attempt's record once cleaned.

        Raises :class:`~caravel.errors.LeaseLostError`, changing nothing, when the lease is no
        longer current.
        """
        now = self.clock.now_ms()
        failure = self.failure_for(lease, category, now, detail=detail)
        done = await self._store.job_fail_many(
            [failure], now, durable=self.durable_acks, recorder=self.recorder
        )
        if lease.job_id not in done:
            raise LeaseLostError(lease.job_id)
        return FailureOutcome(None if failure.retry_at is None else from_ms(failure.retry_at))

    async def record_many(self, outcomes: Sequence[tuple[Lease, str | None]]) -> set[UUID]:
        """Record many outcomes at once: each lease with ``None`` (success) or a failure
        category. Returns the ids whose lease was still current; the others changed nothing."""
        return await self.record([Acknowledgement(lease, category) for lease, category in outcomes])

    async def record(self, acks: Sequence[Acknowledged]) -> set[UUID]:
        """Record many attempts' ends at once (see :class:`Acknowledgement`), with one
        statement per kind present (completions, failures, snoozes). Returns the ids whose
        lease was still current; the others changed nothing."""
        now = self.clock.now_ms()
        completes: list[Lease] = []
        results: dict[UUID, str] = {}
        failures: list[FailedAttempt] = []
        snoozes: list[SnoozedAttempt] = []
        for ack in acks:
            category = ack.category
            if category is not None:
                failures.append(self._failure(ack, category, now))
            elif ack.snooze_ms is not None:
                snoozes.append(SnoozedAttempt(ack.lease, now + ack.snooze_ms))
            else:
                completes.append(ack.lease)
                if ack.result is not None:
                    results[ack.lease.job_id] = ack.result
        held: set[UUID] = set()
        durable, by = self.durable_acks, self.recorder
        if completes:
            held |= await self._store.job_complete_many(
                completes, now, durable=durable, results=results or None, recorder=by
            )
        if failures:
            held |= await self._store.job_fail_many(failures, now, durable=durable, recorder=by)
        if snoozes:
            held |= await self._store.job_snooze_many(snoozes, now, durable=durable, recorder=by)
        return held

    def _failure(self, ack: Acknowledged, category: str, now: int) -> FailedAttempt:
        outcome = failed_attempt_outcome(category, discarded=ack.discarded)
        if ack.final:
            return FailedAttempt(
                ack.lease, category, None, ack.error_class, _cleaned(ack.detail), outcome
            )
        failure = self.failure_for(ack.lease, category, now, retry=ack.retry, detail=ack.detail)
        return FailedAttempt(
            ack.lease, category, failure.retry_at, ack.error_class, failure.detail, outcome
        )

    def failure_for(
        self,
        lease: Lease,
        category: str,
        now: int,
        *,
        retry: RetryPolicy | None = None,
        detail: str | None = None,
    ) -> FailedAttempt:
        """The failed attempt to record: a retry after the backoff for this attempt (by the job
        type's ``retry`` policy where it has one), or a dead letter when the attempt was the
        last. ``detail`` is kept cleaned (:func:`~caravel.details.clean_detail`)."""
        detail = _cleaned(detail)
        outcome = failed_attempt_outcome(category)
        if lease.attempt >= lease.max_attempts:
            return FailedAttempt(lease, category, retry_at=None, detail=detail, outcome=outcome)
        options = self.options
        if retry is None:
            delay = options.retry_backoff(lease.attempt)
        else:
            delay = retry.backoff(lease.attempt, options.retry_delay, options.max_retry_delay)
        return FailedAttempt(
            lease, category, retry_at=now + duration_ms(delay), detail=detail, outcome=outcome
        )

    # ----- completion in the handler's own transaction ---------------------------------------

    async def complete_joined(self, target: object, lease: Lease, result: str | None) -> None:
        """Complete ``lease``'s job in the transaction ``target`` (the handler's session or
        connection) has open, recorded as this holder's; raises :class:`LeaseLostError`
        (changing nothing) when the lease is no longer current."""
        now = self.clock.now_ms()
        held = await self._store.job_complete_joined(
            target, lease, now, result=result, recorder=self.recorder
        )
        if not held:
            raise LeaseLostError(lease.job_id)

    def complete_joined_sync(
        self, target: object, lease: Lease, result: str | None, identity: str
    ) -> None:
        """:meth:`complete_joined` on a blocking ``target``, given the store's
        :meth:`~caravel.store.protocol.Store.database_identity`."""
        now = self.clock.now_ms()
        held = self._store.job_complete_joined_sync(
            target, lease, now, identity, result=result, recorder=self.recorder
        )
        if not held:
            raise LeaseLostError(lease.job_id)

    async def database_identity(self) -> str:
        return await self._store.database_identity()

    async def completed_under(self, lease: Lease) -> bool:
        """Whether ``lease``'s job is completed under it: a completion made in a handler's
        transaction committed."""
        return await self._store.job_completed_under(lease)

    # ----- renewal and deadlines -------------------------------------------------------------

    async def renew(self, lease: Lease, *, now: int | None = None) -> Lease | None:
        """Extend a current, unexpired lease by the lease duration from ``now`` (the clock's
        time by default), never past the maximum lease lifetime counted from the claim.

        Returns the new lease to keep, or ``None`` when renewal was rejected: the lease expired,
        was superseded, the job finished, or the lifetime is used up. A renewal is not an
        attempt."""
        at = self.clock.now_ms() if now is None else now
        expires = min(at + self._lease_ms, self.lifetime_end_ms(lease))
        if expires <= at:
            return None
        return await self._store.job_renew_lease(lease, at, expires)

    def lifetime_end_ms(self, lease: Lease) -> int:
        """When the claim behind ``lease`` reaches the maximum lease lifetime."""
        return lease.claimed_at_ms + self._lifetime_ms

    def deadline_ms(self, lease: Lease) -> int:
        """The latest moment the holder of ``lease`` may keep working on it."""
        return min(lease.expires_at_ms, self.lifetime_end_ms(lease))


def _cleaned(detail: object) -> str | None:
    """A detail to record, cleaned (:func:`~caravel.details.clean_detail`); ``None`` stays."""
    if detail is None:
        return None
    if not isinstance(detail, str):
        raise ValidationError("detail", "must be a string or None")
    return clean_detail(detail)
