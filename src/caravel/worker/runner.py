"""Running one claimed job: decode it, open its scope, run its handler under its lease, and decide
the outcome. Persisting the outcome is the acknowledger's job
(:mod:`caravel.worker.acknowledger`).

The handler is cancelled, and its outcome is not acknowledged, when:

* the lease runs out without renewal (or renewal is off);
* a renewal is rejected (another worker took over, or the job finished);
* the maximum lease lifetime is reached;
* the worker shuts down.

A renewal that fails because the database failed cancels the handler and raises the
:class:`~caravel.errors.StoreError` to the worker, which stops.

An attempt that reaches its execution timeout (the dispatch's ``timeout``, else its job type's)
fails as ``TimedOut`` whatever its handler does after being asked to stop (returns, raises,
snoozes): the watchdog (:mod:`caravel.worker.watchdog`) asks at the timeout, and the attempt is
recorded once the handler stops, or, for a handler that ignores the request, once its lease ends.

What the handler reports while it runs (``ctx.progress``, ``ctx.set_meta``) is written by the
progress writer (:mod:`caravel.worker.progress`); whatever of it is still pending when the
handler stops is written before the outcome is handed on, so it is never fenced off by the
job's own outcome.

Whatever else a handler raises is a failed attempt, ``SystemExit`` included (the category
``HandlerExited``): a handler never ends the worker's process. ``KeyboardInterrupt`` alone is
not the handler's outcome but a request to stop, as Ctrl+C is to the worker: the attempt is
abandoned (``Abandoned.INTERRUPTED``) and the worker stops.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any

from caravel import telemetry
from caravel.clock import Clock, duration_ms
from caravel.codec import PayloadDecodeError, decode_payload
from caravel.context import JobContext, handed
from caravel.details import Redactor, detail_of
from caravel.directives import Discard, Snooze
from caravel.jobs import ClaimedJob, FailureCategory, Lease
from caravel.limits import MAX_ERROR_CLASS_LENGTH, MAX_SNOOZES
from caravel.options import RetryPolicy
from caravel.progress import ProgressReport
from caravel.registry import JobRegistration, JobRegistry
from caravel.store.workflows.records import WorkflowReads
from caravel.worker.joined import AttemptCompletion, settled
from caravel.worker.leases import Leases
from caravel.worker.outcome import Outcome
from caravel.worker.progress import ProgressWriter
from caravel.worker.results import encode_result
from caravel.worker.watchdog import Abandoned, LeaseWatchdog, Watched
from caravel.workflows.context import workflow_of

__all__ = [
    "Abandoned",
    "Executor",
    "JobRunner",
    "ScopeFactory",
    "encode_result",
    "error_class_of",
]

logger = logging.getLogger("caravel.worker")

ScopeFactory = Callable[[], AbstractAsyncContextManager[Any]]


def error_class_of(exc: BaseException) -> str:
    """``module.QualName`` of ``exc``'s class, cut to what the column holds."""
    kind = type(exc)
    return f"{kind.__module__}.{kind.__qualname__}"[:MAX_ERROR_CLASS_LENGTH]


class JobRunner:
    """Runs claimed jobs; shared by ``run_once`` and the continuous worker. Each job runs in its
    caller's task, its handler found in ``registry``; ``watchdog`` keeps every running job's
    lease and ``progress`` writes what handlers report."""

    def __init__(
        self,
        registry: JobRegistry,
        clock: Clock,
        watchdog: LeaseWatchdog,
        *,
        progress: ProgressWriter,
        scope: ScopeFactory | None,
        threads: Executor,
        tracebacks: bool = False,
        max_result_bytes: int = 64 * 1024,
        redactor: Redactor | None = None,
        leases: Leases | None = None,
        reads: WorkflowReads | None = None,
    ) -> None:
        self._leases = leases
        self._progress = progress
        self._reads = reads
        self._tracebacks = tracebacks
        self._redactor = redactor
        self._max_result_bytes = max_result_bytes
        self._registry = registry
        self._clock = clock
        self._scope = scope
        self._threads = threads
        self._watch = watchdog

    async def run(self, claimed: ClaimedJob) -> Outcome:
        """Run one claimed job to an :class:`Outcome`. Raises only for infrastructure failures
        (a renewal the database could not answer) and for cancellation of the caller.

        The run is one consumer span that continues the trace of the enqueue that created the
        job; it ends with the attempt's outcome as its record keeps it, a failure described by
        exception type and class, category and safe detail only."""
        started = time.perf_counter()
        tracked = self._progress.track(claimed)
        try:
            with telemetry.job_span(
                queue=claimed.queue,
                job_type=claimed.job_type,
                job_id=claimed.job_id,
                attempt=claimed.attempt,
                due_at_ms=claimed.due_at_ms,
                trace_context=claimed.trace_context,
                now_ms=self._clock.now_ms(),
            ) as span:
                outcome = await self._run(claimed, span, tracked.report)
                if span.is_recording():
                    recorded = outcome.recorded_as
                    kind = None if recorded is None else recorded.value
                    telemetry.mark_attempt(span, kind, outcome.error_class)
        except BaseException:
            self._progress.drop(tracked)
            raise
        outcome.seconds = time.perf_counter() - started
        # The handler's last report, stored before its outcome (which would fence it off); an
        # attempt abandoned without an outcome writes none.
        await self._progress.finish(
            tracked, write=outcome.abandoned is None and not outcome.committed
        )
        return outcome

    async def _run(
        self, claimed: ClaimedJob, span: telemetry.Span, report: ProgressReport
    ) -> Outcome:
        """The attempt's outcome, settled against a completion its handler made in its own
        transaction (:mod:`caravel.worker.joined`)."""
        leases = self._leases
        if leases is None:
            return await self._handle(claimed, span, report, None)
        joined = AttemptCompletion(
            leases, claimed.lease, asyncio.get_running_loop(), self._max_result_bytes
        )
        outcome = await self._handle(claimed, span, report, joined)
        entry = self._registry.get(claimed.job_type)
        retry = None if entry is None else entry.retry
        outcome = await settled(joined, outcome, leases, retry)
        if outcome.failure is FailureCategory.COMPLETION_NOT_COMMITTED:
            logger.warning(
                "job completed in the handler's transaction, which did not commit",
                extra=_job_fields(claimed, outcome.lease),
            )
            telemetry.mark_failure(span, "CompletionNotCommitted", outcome.failure)
        return outcome

    async def _handle(
        self,
        claimed: ClaimedJob,
        span: telemetry.Span,
        report: ProgressReport,
        joined: AttemptCompletion | None,
    ) -> Outcome:
        lease = claimed.lease
        entry = self._registry.get(claimed.job_type)
        if entry is None:
            telemetry.mark_failure(span, "UnknownJobType", FailureCategory.UNKNOWN_JOB_TYPE)
            return Outcome(lease, failure=FailureCategory.UNKNOWN_JOB_TYPE)
        try:
            job = decode_payload(entry.adapter, claimed.payload)
        except PayloadDecodeError:
            telemetry.mark_failure(span, "PayloadDecodeError", FailureCategory.INVALID_PAYLOAD)
            return Outcome(lease, failure=FailureCategory.INVALID_PAYLOAD)
        context: JobContext[Any] = JobContext(
            job_id=claimed.job_id,
            queue=claimed.queue,
            tenant_id=claimed.tenant_id,
            job_type=claimed.job_type,
            attempt=lease.attempt,
            max_attempts=lease.max_attempts,
            scope=None,
            report=report,
            joined=joined,
        )
        if claimed.upstream is not None:
            context.previous_result, context.batch = handed(claimed.upstream)
            if self._reads is not None:
                context.workflow = workflow_of(
                    claimed.upstream, self._reads, claimed.job_id, claimed.tenant_id
                )
        watched = self._watch.watch(
            lease, context, timeout_ms=_timeout_ms(claimed, entry), cancel_at_timeout=entry.is_async
        )
        scope = self._scope() if self._scope is not None else nullcontext(None)
        returned: object = None
        try:
            # A handler's exception propagates through the scope, so a scope that commits on a
            # clean exit (a session, a unit of work) rolls back a failed attempt.
            async with scope as scope_value:
                context.scope = scope_value
                returned = await self._invoke(entry, job, context)
                self._watch.release(watched)  # from here on, no cancellation by the watchdog
        except asyncio.CancelledError:
            context.cancelled.set()
            if watched.cancels == 0:
                raise  # not the watchdog's doing: the worker is shutting down
            task = asyncio.current_task()
            if task is not None and _uncancel(task, watched.cancels) > 0:
                raise  # the worker is shutting down as well
            if watched.error is not None:
                raise watched.error from None
            if watched.reason is None:
                return self._timed_out(claimed, watched, span, entry.retry)
            return Outcome(watched.lease, abandoned=watched.reason)
        except Snooze as snooze:
            if watched.timed_out:
                return self._timed_out(claimed, watched, span, entry.retry)
            return self._snoozed(claimed, watched.lease, snooze, span, entry.retry)
        except Discard as discard:
            if watched.timed_out:
                return self._timed_out(claimed, watched, span, entry.retry, discard)
            detail = self._detail(claimed, watched.lease, discard)
            telemetry.mark_failure(span, type(discard).__name__, discard.category, detail)
            return Outcome(
                watched.lease,
                failure=discard.category,
                final=True,
                error_class=error_class_of(discard),
                detail=detail,
                discarded=True,
            )
        except KeyboardInterrupt:
            # Ctrl+C's exception, raised in the handler: a request to stop, as the signal is to
            # the command line. The job is not acknowledged; it runs again after its lease.
            context.cancelled.set()
            return Outcome(watched.lease, abandoned=Abandoned.INTERRUPTED)
        except GeneratorExit:
            raise  # this coroutine is being closed: nothing the handler decided
        except BaseException as exc:  # the handler failed or exited, or its scope failed
            if watched.timed_out:  # as it stopped, or after: the timeout came first
                return self._timed_out(claimed, watched, span, entry.retry, exc)
            return self._failed(claimed, watched.lease, exc, span, entry.retry)
        finally:
            self._watch.release(watched)
        if watched.timed_out:  # it returned once asked to stop: its work may be partial
            return self._timed_out(claimed, watched, span, entry.retry)
        if returned is None or (joined is not None and joined.made):
            return Outcome(watched.lease)  # after a completion in its transaction: ignored
        encoded = encode_result(returned, self._max_result_bytes)
        if isinstance(encoded, FailureCategory):
            # The handler's work is done, and the same work would most likely return the same
            # result again: a retry would repeat its effects for nothing, so it dead-letters.
            telemetry.mark_failure(span, "ResultError", encoded)
            return Outcome(watched.lease, failure=encoded, final=True)
        return Outcome(watched.lease, result=encoded)

    def _failed(
        self,
        claimed: ClaimedJob,
        lease: Lease,
        exc: BaseException,
        span: telemetry.Span,
        retry: RetryPolicy | None,
    ) -> Outcome:
        """A failed attempt. ``SystemExit`` (``sys.exit()``, ``exit()``) is a failure of the
        handler like any exception, not the worker's exit, under a category of its own."""
        category = (
            FailureCategory.HANDLER_EXITED
            if isinstance(exc, SystemExit)
            else FailureCategory.HANDLER_FAILED
        )
        detail = self._detail(claimed, lease, exc)
        logger.warning(
            "job handler failed",
            exc_info=exc if self._tracebacks else None,
            extra={
                **_job_fields(claimed, lease),
                "error_type": type(exc).__name__,
                "detail": detail,
            },
        )
        telemetry.mark_failure(span, type(exc).__name__, category, detail)
        return Outcome(
            lease,
            failure=category,
            error=exc,
            error_class=error_class_of(exc),
            retry=retry,
            detail=detail,
        )

    def _detail(self, claimed: ClaimedJob, lease: Lease, exc: BaseException) -> str | None:
        """The safe detail to keep of the attempt that ended with ``exc`` (see
        :mod:`caravel.details`)."""
        return detail_of(exc, self._redactor, log_fields=_job_fields(claimed, lease))

    def _timed_out(
        self,
        claimed: ClaimedJob,
        watched: Watched,
        span: telemetry.Span,
        retry: RetryPolicy | None,
        exc: BaseException | None = None,
    ) -> Outcome:
        """An attempt that reached its execution timeout: a failure, retried by the job type's
        policy. ``exc`` is what the handler raised as it stopped, if anything: its class is not
        kept (the timeout is the cause), its safe detail is."""
        category = FailureCategory.TIMED_OUT
        lease = watched.lease
        detail = None if exc is None else self._detail(claimed, lease, exc)
        logger.warning(
            "job timed out",
            extra={
                **_job_fields(claimed, lease),
                "timeout_ms": watched.timeout_ms,
                "stuck": watched.stuck,
                "detail": detail,
            },
        )
        telemetry.mark_failure(span, "TimedOut", category, detail)
        return Outcome(lease, failure=category, retry=retry, detail=detail)

    def _snoozed(
        self,
        claimed: ClaimedJob,
        lease: Lease,
        snooze: Snooze,
        span: telemetry.Span,
        retry: RetryPolicy | None,
    ) -> Outcome:
        if claimed.snoozes >= MAX_SNOOZES:
            category = FailureCategory.SNOOZE_LIMIT
            telemetry.mark_failure(span, type(snooze).__name__, category)
            return Outcome(lease, failure=category, final=True, retry=retry)
        return Outcome(lease, snooze_ms=duration_ms(snooze.delay))

    async def _invoke(
        self, entry: JobRegistration, job: object, context: JobContext[Any]
    ) -> object:
        if entry.is_async:
            returned: object = await entry.handler(job, context)  # type: ignore[misc]
            return returned
        loop = asyncio.get_running_loop()
        # Copy the context variables (the current span among them) into the handler's thread.
        call = contextvars.copy_context().run
        return await loop.run_in_executor(self._threads, call, entry.handler, job, context)


def _job_fields(claimed: ClaimedJob, lease: Lease) -> dict[str, object]:
    """The fields of a log line about an attempt: its job's id, queue and type, its number."""
    return {
        "job_id": str(claimed.job_id),
        "queue": claimed.queue,
        "job_type": claimed.job_type,
        "attempt": lease.attempt,
    }


def _timeout_ms(claimed: ClaimedJob, entry: JobRegistration) -> int | None:
    """The attempt's execution timeout in ms: the job's own, else its type's, else none."""
    if claimed.timeout_ms is not None:
        return claimed.timeout_ms
    return None if entry.timeout is None else duration_ms(entry.timeout)


def _uncancel(task: asyncio.Task[Any], times: int) -> int:
    """Take back the watchdog's ``times`` cancellations of ``task``; the requests left (the
    worker's own, when it is shutting down too)."""
    left = 0
    for _ in range(times):
        left = task.uncancel()
    return left
