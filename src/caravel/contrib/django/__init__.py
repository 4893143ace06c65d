"""Caravel as the backend of Django's Tasks framework (``django.tasks`` in Django 6, the
``django-tasks`` backport on Django 5.2).

Add ``"caravel.contrib.django"`` to ``INSTALLED_APPS`` (its migration applies the queue's
schema, so ``manage.py migrate`` is the one step, and it brings the ``caravel_worker`` and
``caravel_status`` commands and the admin pages), and set::

    TASKS = {"default": {"BACKEND": "caravel.contrib.django.CaravelBackend"}}

The guide is ``docs/guides/django.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from caravel._lazy import lazy_attributes

if TYPE_CHECKING:
    from caravel.contrib.django.backend import CaravelBackend
    from caravel.contrib.django.dispatch import CaravelTask, options
    from caravel.contrib.django.queues import close_queues
    from caravel.contrib.django.running import current_job


__all__ = ["CaravelBackend", "CaravelTask", "close_queues", "current_job", "options", "result"]

# Lazy, so that Django can import this package (an installed app) before settings are ready.
_HOMES = {
    "CaravelBackend": "caravel.contrib.django.backend",
    "CaravelTask": "caravel.contrib.django.dispatch",
    "options": "caravel.contrib.django.dispatch",
    "close_queues": "caravel.contrib.django.queues",
    "current_job": "caravel.contrib.django.running",
}

__getattr__ = lazy_attributes(__name__, globals(), _HOMES)


def result(task: Any, result_id: str, *, tenant_id: str) -> Any:
    """``task.get_result(result_id)`` for a job of ``tenant_id`` (the verified caller's tenant:
    a plain ``get_result`` reads the default tenant's jobs only)."""
    backend = task.get_backend()
    found = backend.get_tenant_result(result_id, tenant_id)
    if found.task.func != task.func:
        from caravel.contrib.django.compat import TaskResultDoesNotExist

        raise TaskResultDoesNotExist(result_id)
    return found
