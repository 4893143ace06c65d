"""Running every due job to completion in the test's own process, through the real worker.

:func:`drain` builds a :class:`~caravel.QueueWorker` on the queue and steps it
(:meth:`~caravel.QueueWorker.step`, what ``run_once`` does) until nothing is due, so a job runs
exactly as a worker process would run it: decoded from its stored JSON, under a lease, its
outcome recorded with retries and dead letters. With ``advance=True`` and a
:class:`~caravel.testing.ManualClock` it also moves time to each next due moment (a delay, a
retry's backoff, a lease running out) and keeps going, without sleeping.

A handler that raises ``KeyboardInterrupt`` stops the drain as Ctrl+C stops a worker: its job is
left without an acknowledgement (it runs again once its lease ends, as after a worker's
shutdown), the worker is closed, and ``KeyboardInterrupt`` reaches the caller, in the caller's
own thread for a ``SyncQueue``.
"""

from __future__ import annotations

from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from caravel.clock import from_ms, to_ms_ceil
from caravel.errors import DrainLimitError, ValidationError
from caravel.jobs import JobState
from caravel.options import WorkerOptions
from caravel.queue import DatabaseQueue
from caravel.store.protocol import JobFilter, Store
from caravel.testing._shells import SyncShell, on_queue
from caravel.testing.clock import ManualClock
from caravel.testing.runs import JobRun, job_run
from caravel.validation import check_queue_name
from caravel.worker.runner import Abandoned, ScopeFactory
from caravel.worker.service import QueueWorker

__all__ = ["drain"]

#: Jobs read per page when looking for the next due moment.
_PAGE = 500


@overload
def drain(
    queue: DatabaseQueue,
    *,
    queues: Sequence[str] | None = None,
    max_jobs: int = 1000,
    advance: bool = False,
    scope: ScopeFactory | None = None,
) -> Coroutine[Any, Any, list[JobRun]]: ...
@overload
def drain(
    queue: SyncShell,
    *,
    queues: Sequence[str] | None = None,
    max_jobs: int = 1000,
    advance: bool = False,
    scope: ScopeFactory | None = None,
) -> list[JobRun]: ...
def drain(
    queue: DatabaseQueue | SyncShell,
    *,
    queues: Sequence[str] | None = None,
    max_jobs: int = 1000,
    advance: bool = False,
    scope: ScopeFactory | None = None,
) -> Coroutine[Any, Any, list[JobRun]] | list[JobRun]:
    """Run every due job of ``queues`` (every queue that has jobs when ``None``), and the jobs
    they enqueue, until none is due; the runs in the order they happened.

    Await it for a :class:`~caravel.DatabaseQueue`; call it plainly for a ``SyncQueue``. With
    ``advance=True`` the queue's clock must be a :class:`~caravel.testing.ManualClock`: it is
    moved to each next due time (delays, retry backoffs, expired leases) until nothing is left
    waiting. More than ``max_jobs`` runs raise :class:`~caravel.errors.DrainLimitError`.
    ``scope`` is the per-job scope factory a worker would be given.
    """
    names = _checked_queues(queues)
    if isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or max_jobs < 1:
        raise ValidationError("max_jobs", "must be a positive integer")
    if not isinstance(advance, bool):
        raise ValidationError("advance", "must be True or False")

    async def work(inner: DatabaseQueue) -> _Drained:
        drained = _Drained()
        await drain_queue(
            inner, names, max_jobs=max_jobs, advance=advance, scope=scope, into=drained
        )
        return drained

    if isinstance(queue, DatabaseQueue):
        return _awaited(work(queue))
    done = on_queue(queue, work)
    assert isinstance(done, _Drained)
    return done.runs_or_interrupt()


@dataclass(slots=True)
class _Drained:
    """What a drain ran, and whether a handler interrupted it. The interrupt is raised by the
    caller's side, never on a ``SyncQueue``'s loop thread, which it would stop for good."""

    runs: list[JobRun] = field(default_factory=list)
    interrupted: bool = False

    def runs_or_interrupt(self) -> list[JobRun]:
        if self.interrupted:
            raise KeyboardInterrupt
        return self.runs


async def _awaited(work: Coroutine[Any, Any, _Drained]) -> list[JobRun]:
    return (await work).runs_or_interrupt()


def _checked_queues(queues: Sequence[str] | None) -> list[str] | None:
    if queues is None:
        return None
    if isinstance(queues, str):
        raise ValidationError("queues", "must be a list of queue names, not one string")
    names = list(queues)
    if not names:
        raise ValidationError("queues", "must name at least one queue, or be None for all")
    for name in names:
        check_queue_name(name, "queues")
    return names


async def drain_queue(
    queue: DatabaseQueue,
    queues: list[str] | None,
    *,
    max_jobs: int,
    advance: bool,
    scope: ScopeFactory | None = None,
    into: _Drained | None = None,
) -> list[JobRun]:
    """:func:`drain` on the async queue (the loop both shells share); ``into`` collects the
    runs and whether a handler's ``KeyboardInterrupt`` stopped it (which it then returns)."""
    clock = queue.clock
    if advance and not isinstance(clock, ManualClock):
        raise ValidationError("advance", "needs a queue whose clock is a ManualClock")
    drained = into if into is not None else _Drained()
    runs = drained.runs
    async with QueueWorker(queue, options=WorkerOptions(concurrency=1), scope=scope) as worker:
        while True:
            names = queues if queues is not None else await _queues_with_jobs(queue)
            ran = False
            for name in names:
                while True:
                    if len(runs) >= max_jobs:
                        if await _due_now(queue, name):
                            raise DrainLimitError(len(runs))
                        break
                    step = await worker.step(name)
                    if step is None:
                        break
                    runs.append(job_run(step))
                    if step.abandoned is Abandoned.INTERRUPTED:
                        drained.interrupted = True
                        return runs
                    ran = True
            if ran:
                continue  # the jobs that ran may have enqueued more, in any queue
            if not isinstance(clock, ManualClock) or not advance:
                return runs
            due = await next_due_ms(queue.store, names, clock.now_ms())
            if due is None:
                return runs
            if len(runs) >= max_jobs:
                raise DrainLimitError(len(runs))
            await clock.set(from_ms(due))


async def _queues_with_jobs(queue: DatabaseQueue) -> list[str]:
    return [row.queue for row in await queue.store.queue_counts(None, queue.clock.now_ms())]


async def _due_now(queue: DatabaseQueue, name: str) -> bool:
    for row in await queue.store.queue_counts(name, queue.clock.now_ms()):
        if row.ready or row.expired:
            return True
    return False


async def next_due_ms(store: Store, queues: Sequence[str], now: int) -> int | None:
    """The next moment after ``now`` when a job of ``queues`` becomes claimable: a waiting job's
    due time, or a running job's lease end. ``None`` when nothing waits. Held jobs (a chain's
    later steps, a batch's callback) wait for the jobs that release them, not for a time."""
    found: int | None = None
    for name in queues:
        for state in (JobState.READY, JobState.RUNNING):
            offset = 0
            while True:
                where = JobFilter(queue=name, state=state, limit=_PAGE, offset=offset)
                page = await store.job_list(where)
                for status in page:
                    moment = status.due_at if state is JobState.READY else status.lease_expires_at
                    if moment is None or status.held:  # a held job waits for a release
                        continue
                    at = to_ms_ceil(moment)
                    if at > now and (found is None or at < found):
                        found = at
                if len(page) < _PAGE:
                    break
                offset += _PAGE
    return found
