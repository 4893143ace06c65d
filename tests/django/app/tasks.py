"""The tasks the Django tests enqueue (module level, as Django requires)."""

from __future__ import annotations

import sys
from importlib import import_module
from typing import Any

from caravel import Discard, JobFailed
from caravel.contrib.django.compat import SOURCE, TaskContext

# django.tasks.task or django_tasks.task, whichever this Django has.
task: Any = import_module(SOURCE).task

#: What the tasks saw, for the tests to read (the worker runs in this process).
SEEN: list[Any] = []


@task
def add(a: int, b: int) -> int:
    return a + b


@task(queue_name="emails", priority=10)
def send_email(to: str, *, subject: str) -> dict[str, str]:
    SEEN.append(("send_email", to, subject))
    return {"to": to, "subject": subject}


@task(takes_context=True)
def flaky(context: TaskContext, fail_times: int) -> int:
    """Fails on its first ``fail_times`` attempts; returns the attempt it succeeded on."""
    SEEN.append(("flaky", context.attempt, context.task_result.id))
    if context.attempt <= fail_times:
        raise RuntimeError("secret detail that must never be stored")
    return int(context.attempt)


@task
def broken() -> None:
    raise KeyError("never stored either")


@task
async def async_double(value: int) -> int:
    return value * 2


@task
def exits(code: int) -> None:
    """Ends the way a script does on an error: ``sys.exit``."""
    sys.exit(code)


@task
async def async_exits() -> None:
    exit(2)


@task
def not_json() -> object:
    """Returns a value JSON cannot hold (Django's normalize_json raises TypeError)."""
    return {1, 2}


@task
async def async_not_json() -> object:
    return object()


@task
def discards() -> None:
    """Tells the worker to stop trying: a dead letter at once, FAILED."""
    raise Discard("Gone")


@task
def provider_down() -> None:
    """Fails with a detail marked safe beside a message that is not."""
    raise JobFailed("order 7 of a@example.com: 503", safe_detail="provider\nanswered 503")


@task
def counts_rows(rows: int) -> int:
    """Reports its progress and metadata through the Caravel context of its job."""
    from caravel.contrib.django import current_job

    job = current_job()
    job.set_meta("rows", rows)
    for done in range(0, rows + 1, 10):
        job.progress(done, rows, "counting")
    return rows


@task
async def async_counts_rows(rows: int) -> int:
    from caravel.contrib.django import current_job

    current_job().progress(rows, rows, "counted")
    current_job().set_meta("async", True)
    return rows
