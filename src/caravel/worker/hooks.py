"""Calling the application's alert hooks (``on_dead_letter``, ``on_stuck``) off the worker's
hot path.

:meth:`Hooks.emit` only queues the call and returns, so recording outcomes and watching leases
never wait for an application's code. One task calls the queued hooks in order, each bounded by
``hook_timeout`` on the queue's clock: an async hook is awaited (and cancelled at the bound), a
synchronous one runs in a thread of its own, apart from the handlers' threads (a synchronous
call cannot be interrupted: one that never returns keeps that thread, so the later synchronous
calls time out in turn, while async hooks go on). A hook that raises or times out is logged by
its exception's class only, never its message, and counted; the queue of calls waiting is
bounded, and a call past the bound is dropped the same way, as are the calls a stopping worker
has no time left for (it waits one ``hook_timeout`` in all).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from caravel.clock import Clock
from caravel.hooks import DeadLetterEvent, StuckEvent
from caravel.jobs import ClaimedJob
from caravel.telemetry import record_hook_failure
from caravel.worker.outcome import Outcome
from caravel.worker.threads import HandlerThreads

__all__ = ["MAX_PENDING_HOOKS", "Hooks", "dead_letter_event"]

logger = logging.getLogger("caravel.worker")

#: Calls that may wait their turn; more are dropped (a hook that cannot keep up must not grow
#: the worker's memory without bound).
MAX_PENDING_HOOKS = 1000

Event = DeadLetterEvent | StuckEvent
Hook = Callable[[Any], object]


def _is_async(hook: Hook) -> bool:
    """Whether calling ``hook`` makes a coroutine (an async function, or an object whose
    ``__call__`` is one)."""
    return inspect.iscoroutinefunction(hook) or inspect.iscoroutinefunction(type(hook).__call__)


def dead_letter_event(claimed: ClaimedJob, outcome: Outcome) -> DeadLetterEvent:
    """The event of a dead letter ``outcome`` recorded for ``claimed``: what its attempt
    record holds, never its payload or its exception (``outcome.error`` stays behind)."""
    recorded = outcome.recorded_as
    category = outcome.category
    assert recorded is not None, "a dead letter has a failed attempt's record"
    assert category is not None, "a dead letter is a failure"
    return DeadLetterEvent(
        job_id=claimed.job_id,
        queue=claimed.queue,
        job_type=claimed.job_type,
        tenant_id=claimed.tenant_id,
        attempt=outcome.lease.attempt,
        outcome=recorded,
        category=category,
        error_class=outcome.error_class,
        detail=outcome.detail,
    )


class Hooks:
    """The queue of hook calls of one worker, and the task that makes them."""

    def __init__(self, clock: Clock, timeout_ms: int, max_pending: int = MAX_PENDING_HOOKS) -> None:
        self._clock = clock
        self._timeout_ms = timeout_ms
        self._max_pending = max_pending
        self._pending: collections.deque[tuple[str, Hook, Event]] = collections.deque()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        self._thread: HandlerThreads | None = None
        #: Calls that raised, timed out or were dropped since the worker was built.
        self.failures = 0

    def emit(self, name: str, hook: Hook, event: Event) -> None:
        """Queue ``hook(event)`` (``name`` is the option, for the log) and return at once."""
        if len(self._pending) >= self._max_pending:
            self._failed(name, event, "dropped", None)
            return
        self._pending.append((name, hook, event))
        self._idle.clear()
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="caravel-hooks")

    async def idle(self) -> None:
        """Wait until every queued call was made (or given up)."""
        await self._idle.wait()

    async def close(self) -> None:
        """Make the calls still queued, waiting one ``hook_timeout`` in all: a stopping worker
        is held up by its hooks no longer than by one call. What is left then is dropped."""
        task = self._task
        if task is not None and not task.done():
            clock = self._clock
            timer = asyncio.ensure_future(clock.sleep_until(clock.now_ms() + self._timeout_ms))
            idle = asyncio.ensure_future(self._idle.wait())
            try:
                await asyncio.wait({idle, timer}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                timer.cancel()
                idle.cancel()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._task = None
        while self._pending:
            name, _, event = self._pending.popleft()
            self._failed(name, event, "dropped", None)
        self._idle.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.shutdown(wait=False, cancel_futures=True)

    async def _run(self) -> None:
        while True:
            while self._pending:
                name, hook, event = self._pending.popleft()
                await self._call(name, hook, event)
            self._idle.set()
            self._wake.clear()
            await self._wake.wait()

    async def _call(self, name: str, hook: Hook, event: Event) -> None:
        try:
            call = asyncio.ensure_future(_awaited(self._start(hook, event)))
        except Exception as exc:  # the hook could not even be called
            self._failed(name, event, "raised", exc)
            return
        clock = self._clock
        timer = asyncio.ensure_future(clock.sleep_until(clock.now_ms() + self._timeout_ms))
        try:
            await asyncio.wait({call, timer}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            call.cancel()  # the worker is closing: this call is cut short
            call.add_done_callback(_forget)
            self._failed(name, event, "dropped", None)
            raise
        finally:
            timer.cancel()
        if not call.done():
            # Not waited for: a hook that ignores its cancellation must not hold up the next.
            call.cancel()
            call.add_done_callback(_forget)
            self._failed(name, event, "timed_out", None)
            return
        error = asyncio.CancelledError() if call.cancelled() else call.exception()
        if error is not None:
            self._failed(name, event, "raised", error)

    def _start(self, hook: Hook, event: Event) -> Awaitable[object] | object:
        """Call ``hook``: an async one here (its coroutine), a synchronous one in the hook
        thread (the future of its return)."""
        if _is_async(hook):
            return hook(event)
        if self._thread is None:
            # A daemon thread, as the handlers': a hook that never returns must not keep the
            # process from exiting.
            self._thread = HandlerThreads(1, name="caravel-hook")
        return asyncio.get_running_loop().run_in_executor(self._thread, hook, event)

    def _failed(self, name: str, event: Event, reason: str, error: BaseException | None) -> None:
        self.failures += 1
        record_hook_failure(name, reason)
        logger.warning(
            "worker hook failed",
            extra={
                "hook": name,
                "reason": reason,
                "error_type": None if error is None else type(error).__name__,
                "job_id": str(event.job_id),
                "queue": event.queue,
                "job_type": event.job_type,
                "attempt": event.attempt,
            },
        )


async def _awaited(result: Awaitable[object] | object) -> None:
    """Wait for a hook's call: a synchronous hook may still return an awaitable (a function
    that returns a coroutine), which is awaited in turn."""
    value = await result if inspect.isawaitable(result) else result
    if inspect.isawaitable(value):
        await value


def _forget(call: asyncio.Future[None]) -> None:
    """Retrieve a given-up call's end, so asyncio does not report it as never retrieved."""
    if not call.cancelled():
        call.exception()
