"""The job handler of each Django task: what a Caravel worker runs.

It calls the task's function with the stored arguments (and, for ``takes_context`` tasks, a
``TaskContext`` whose result carries the attempt), sends Django's ``task_started`` and
``task_finished`` signals around every attempt, and returns the JSON-normalised return value,
which the worker stores as the job's result. Every attempt that finishes sends
``task_finished``: a success with the SUCCESSFUL result; any failure with the FAILED result,
first, then the exception propagates to the worker, which records its class and retries or
dead-letters the job. A failure is whatever Django's own backends count as one: any exception,
``SystemExit`` (``sys.exit()``, ``exit()``) included, a ``Discard``, and a return value JSON
cannot hold (``TypeError``, as Django's ``normalize_json`` raises). The signal goes out after the
exception handler, not in it, so Django's logging receiver has no traceback (with its message)
to log. What ends an attempt without finishing it sends nothing: a ``Snooze`` (the task runs
again), a cancellation (a lost lease, a shutdown) and ``KeyboardInterrupt`` (the worker stops,
as on Ctrl+C). A synchronous task runs in a worker thread between ``close_old_connections()``
calls, as a Django request does, so no broken or expired database connection lingers in a
thread from one job to the next.

While the function runs, :func:`current_job` is the Caravel context of its job, through which
it reports progress and metadata (``current_job().progress(...)``, ``.set_meta(...)``), read
back as the result's ``progress`` and ``meta``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextvars import ContextVar
from inspect import iscoroutinefunction
from typing import Any

from caravel.context import JobContext
from caravel.contrib.django.compat import (
    TaskContext,
    normalize_json,
    task_finished,
    task_started,
)
from caravel.contrib.django.results import exception_path, finish, running_result
from caravel.details import safe_detail_of
from caravel.directives import Snooze

__all__ = ["current_job", "handler_for"]

#: The job whose task runs in this thread or asyncio task.
_RUNNING: ContextVar[JobContext[Any] | None] = ContextVar("caravel_django_job", default=None)


def current_job() -> JobContext[Any]:
    """The Caravel context of the job whose task is running here (in the task's function, on a
    Caravel worker): its :meth:`~caravel.JobContext.progress` and
    :meth:`~caravel.JobContext.set_meta` report how the task is doing, read back as its
    result's ``progress`` and ``meta``. Raises ``RuntimeError`` anywhere else."""
    found = _RUNNING.get()
    if found is None:
        raise RuntimeError("current_job() is for a task's function while a Caravel worker runs it")
    return found


#: What ends an attempt without finishing the task: it passes through, with no signal.
_UNFINISHED = (Snooze, KeyboardInterrupt, asyncio.CancelledError, GeneratorExit)


def _now() -> Any:
    from django.utils import timezone

    return timezone.now()


def _sender() -> type[Any]:
    from caravel.contrib.django.backend import CaravelBackend

    return CaravelBackend


def _start(task: Any, alias: str, job: Any, ctx: JobContext[Any]) -> tuple[Any, list[Any]]:
    result = running_result(task, alias, ctx.job_id, ctx.queue, ctx.attempt, job, _now())
    task_started.send(sender=_sender(), task_result=result)
    args = list(job.args)
    if task.takes_context:
        args.insert(0, TaskContext(task_result=result))
    return result, args


def _failed(result: Any, exc: BaseException) -> BaseException:
    """Send the FAILED result, and give back ``exc`` to raise. Called after the ``except``
    block, not in it: Django's own receiver logs ``sys.exc_info()`` when there is one, and a
    traceback quotes the exception's message, which never reaches our logs. The result's
    error carries the detail the task marked safe (``JobFailed``, ``Discard``), as the worker
    keeps it; a worker's redactor is not asked here."""
    detail = safe_detail_of(exc)
    finish(result, _now(), error=exception_path(exc), detail=detail)
    task_finished.send(sender=_sender(), task_result=result)
    return exc


def _finished(result: Any, raw: Any, failure: BaseException | None) -> Any:
    """Send ``task_finished`` for an attempt that ended with ``failure`` or returned ``raw``;
    the JSON value to store, or the failure raised (a value JSON cannot hold is one)."""
    if failure is None:
        try:
            value = normalize_json(raw)
        except Exception as exc:
            failure = exc
        else:
            finish(result, _now(), value=value)
            task_finished.send(sender=_sender(), task_result=result)
            return value
    raise _failed(result, failure)


def _on_backend(task: Any, alias: str) -> Any:
    """``task`` on the backend whose worker runs it (so a result's ``refresh()`` reads there),
    or as defined when that backend would refuse it."""
    if task.backend == alias:
        return task
    from caravel.contrib.django.compat import InvalidTask

    try:
        return task.using(backend=alias)
    except InvalidTask:
        return task


def handler_for(task: Any, alias: str) -> Callable[[Any, JobContext[Any]], Any]:
    """The handler of ``task`` run by backend ``alias``'s worker: async for a coroutine
    function, synchronous otherwise."""
    func = task.func
    if iscoroutinefunction(func):

        async def run_async(job: Any, ctx: JobContext[Any]) -> Any:
            result, args = _start(_on_backend(task, alias), alias, job, ctx)
            raw: Any = None
            failure: BaseException | None = None
            running = _RUNNING.set(ctx)
            try:
                raw = await func(*args, **job.kwargs)
            except _UNFINISHED:
                raise
            except BaseException as exc:  # as Django's backends, SystemExit included
                failure = exc
            finally:
                _RUNNING.reset(running)
            return _finished(result, raw, failure)

        return run_async

    def run_sync(job: Any, ctx: JobContext[Any]) -> Any:
        from django.db import close_old_connections

        close_old_connections()
        try:
            result, args = _start(_on_backend(task, alias), alias, job, ctx)
            raw: Any = None
            failure: BaseException | None = None
            running = _RUNNING.set(ctx)
            try:
                raw = func(*args, **job.kwargs)
            except _UNFINISHED:
                raise
            except BaseException as exc:  # as Django's backends, SystemExit included
                failure = exc
            finally:
                _RUNNING.reset(running)
            return _finished(result, raw, failure)
        finally:
            close_old_connections()

    return run_sync
