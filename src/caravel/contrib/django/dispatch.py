"""From a Django task to Caravel's :class:`~caravel.DispatchOptions`, in one place, and the
helper that gives a task Caravel's own options: an idempotency key, a tenant, tags.

Django's ``Task.using()`` covers ``priority``, ``queue_name``, ``run_after`` and ``backend``;
:func:`options` is the same kind of call for the rest, so Django code never leaves the Tasks
API::

    from caravel.contrib.django import options

    options(send_receipt, idempotency_key=f"receipt:{order.pk}").enqueue(order.pk)
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from caravel.contrib.django.compat import (
    TASK_MAX_PRIORITY,
    TASK_MIN_PRIORITY,
    InvalidTask,
    Task,
)
from caravel.jobs import DEFAULT_TENANT, DispatchOptions

__all__ = ["CaravelTask", "dispatch_options", "options"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CaravelTask(Task):
    """A Django task with Caravel's options (what :func:`options` returns). It enqueues,
    ``using()``s and reads results as the task it was made from."""

    idempotency_key: str | None = None
    tenant_id: str = DEFAULT_TENANT
    tags: tuple[str, ...] = ()
    max_attempts: int | None = None


def options(
    task: Any,
    *,
    idempotency_key: str | None = None,
    tenant_id: str | None = None,
    tags: tuple[str, ...] | list[str] | None = None,
    max_attempts: int | None = None,
) -> Any:
    """``task`` with Caravel's dispatch options, each checked now by our rules (a bad one
    raises :class:`~caravel.errors.ValidationError` naming it). What is left out keeps the
    value ``task`` had (a plain task: no key, the default tenant, no tags)."""
    base = {f.name: getattr(task, f.name) for f in fields(Task)}
    kept = {
        f: getattr(task, f)
        for f in ("idempotency_key", "tenant_id", "tags", "max_attempts")
        if hasattr(task, f)
    }
    changes: dict[str, Any] = {
        "idempotency_key": idempotency_key,
        "tenant_id": tenant_id,
        "tags": tuple(tags) if tags is not None else None,
        "max_attempts": max_attempts,
    }
    kept.update({k: v for k, v in changes.items() if v is not None})
    made = CaravelTask(**base, **kept)
    dispatch_options(made)  # checks the options now, where the mistake is
    return made


def _not_before(run_after: datetime | None) -> datetime | None:
    if run_after is None or run_after.tzinfo is not None:
        return run_after
    from django.utils import timezone

    # USE_TZ = False: Django allows a naive run_after, meant in the current time zone.
    aware: datetime = timezone.make_aware(run_after)
    return aware


def dispatch_options(task: Any) -> DispatchOptions:
    """The dispatch of one enqueue of ``task``: its queue, due time (``run_after``, never
    early), priority and, for a :class:`CaravelTask`, Caravel's own options."""
    priority = task.priority
    whole = isinstance(priority, int) and not isinstance(priority, bool)
    if not whole or not TASK_MIN_PRIORITY <= priority <= TASK_MAX_PRIORITY:
        raise InvalidTask(
            f"priority must be a whole number between {TASK_MIN_PRIORITY} and {TASK_MAX_PRIORITY}."
        )
    extra: dict[str, Any] = {}
    if isinstance(task, CaravelTask):
        extra = {
            "tenant_id": task.tenant_id,
            "idempotency_key": task.idempotency_key,
            "tags": task.tags,
            "max_attempts": task.max_attempts,
        }
    return DispatchOptions(
        queue=task.queue_name,
        not_before=_not_before(task.run_after),
        # Django's -100..100, default 0, is exactly ours: the value passes through unchanged.
        priority=priority,
        **extra,
    )
