"""A result's ``errors`` from the job's attempt history, on SQLite and PostgreSQL: one Django
``TaskError`` per failed attempt, oldest first, with the exception's class path and, for a
traceback, only the detail the task marked safe (empty without one). Read by ``get_result``,
``refresh()`` and ``arefresh()`` alike; the worker is ours, in this process, on a manual clock
so retries come due at once."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from caravel.testing import ManualClock, drain


def _backend(alias: str) -> Any:
    from caravel.contrib.django.compat import task_backends

    return task_backends[alias]


def _clock() -> ManualClock:
    # After the enqueue's real time, so the jobs the backend enqueued are due on it.
    return ManualClock(datetime.now(UTC) + timedelta(seconds=1))


def _drain_retrying(alias: str) -> list[Any]:
    from caravel.sync import SyncQueue

    b = _backend(alias)
    with SyncQueue(b.config.queue_url(), b.catalog.registry, clock=_clock()) as queue:
        return drain(queue, advance=True)


def _errors(result: Any) -> list[tuple[str, str]]:
    return [(e.exception_class_path, e.traceback) for e in result.errors]


def test_each_failed_attempt_is_one_error_even_after_a_success(alias: str, tasks: Any) -> None:
    """``flaky`` raises a plain exception (its message not marked safe) twice, then succeeds:
    two errors with the class and an empty traceback, and nothing of the message."""
    from caravel.contrib.django.compat import TaskResultStatus

    result = tasks.flaky.using(backend=alias).enqueue(2)
    runs = _drain_retrying(alias)
    assert [run.outcome for run in runs] == ["retrying", "retrying", "completed"]
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert _errors(result) == [("builtins.RuntimeError", "")] * 2
    assert all(e.exception_class is RuntimeError for e in result.errors)
    found = tasks.flaky.using(backend=alias).get_result(result.id)
    assert _errors(found) == _errors(result)
    assert "secret detail" not in repr(found.errors)


def test_a_detail_marked_safe_is_each_failed_attempts_traceback(alias: str, tasks: Any) -> None:
    """``provider_down`` raises ``JobFailed`` with a message quoting an address and a safe
    detail: each of its two failed attempts is an error whose traceback is that detail,
    cleaned, as a traceback's last line; the message is nowhere."""
    from caravel.contrib.django import options
    from caravel.contrib.django.compat import TaskResultStatus

    task = options(tasks.provider_down.using(backend=alias), max_attempts=2)
    result = task.enqueue()
    runs = _drain_retrying(alias)
    assert [run.outcome for run in runs] == ["retrying", "dead_letter"]
    asyncio.run(result.arefresh())
    assert result.status == TaskResultStatus.FAILED
    line = "caravel.directives.JobFailed: provider answered 503"
    assert _errors(result) == [("caravel.directives.JobFailed", line)] * 2
    assert "a@example.com" not in repr(result.errors)


def test_a_lost_lease_is_an_error_of_its_own(alias: str, tasks: Any) -> None:
    """An attempt whose worker vanished (its lease ran out, the next claim took the job over)
    is an error too, ``LeaseLostError``, with no traceback; the attempt that then succeeded
    adds none."""
    from caravel import Leases
    from caravel.contrib.django.compat import TaskResultStatus
    from caravel.sync import SyncQueue

    result = tasks.add.using(backend=alias).enqueue(2, 3)
    b = _backend(alias)
    clock = _clock()
    with SyncQueue(b.config.queue_url(), b.catalog.registry, clock=clock) as queue:
        assert queue.call(Leases(queue.queue).claim, "default") is not None
        queue.call(clock.advance, queue.queue.options.lease_duration)
        runs = drain(queue)
    assert [run.outcome for run in runs] == ["completed"]
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert _errors(result) == [("caravel.errors.LeaseLostError", "")]


def test_a_result_without_failed_attempts_has_no_error(alias: str, tasks: Any) -> None:
    result = tasks.add.using(backend=alias).enqueue(1, 1)
    assert _errors(result) == []
    _drain_retrying(alias)
    result.refresh()
    assert _errors(result) == []
