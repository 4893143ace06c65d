"""Django's Tasks API, from wherever this Django has it: ``django.tasks`` (Django 6) or the
``django-tasks`` backport (``django_tasks``, for Django 5.2 on Python 3.11).

The two spell a few names differently (``InvalidTask`` and ``InvalidTaskError``); everything
else in this package imports the names from here, so no other module asks which one it has.
The names are typed ``Any``: the backport ships types and Django does not, and mypy must
give the same answer on either.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

__all__ = [
    "DEFAULT_TASK_QUEUE_NAME",
    "SOURCE",
    "TASK_MAX_PRIORITY",
    "TASK_MIN_PRIORITY",
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "normalize_json",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]


def _first(*names: str) -> ModuleType:
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError(
        "caravel.contrib.django needs Django's Tasks framework: Django 6 (django.tasks), or "
        "Django 5.2 with the django-tasks backport: pip install 'caravel-queue[django]'"
    )


def _load() -> tuple[str, dict[str, Any]]:
    try:
        importlib.import_module("django.tasks")
        package = "django.tasks"
    except ImportError:
        _first("django_tasks")
        package = "django_tasks"
    base = importlib.import_module(f"{package}.base")
    backends = importlib.import_module(f"{package}.backends.base")
    errors = importlib.import_module(f"{package}.exceptions")
    signals = importlib.import_module(f"{package}.signals")
    root = importlib.import_module(package)
    json_home = "django.utils.json" if package == "django.tasks" else "django_tasks.utils"
    names = {
        "DEFAULT_TASK_QUEUE_NAME": base.DEFAULT_TASK_QUEUE_NAME,
        "TASK_MAX_PRIORITY": base.TASK_MAX_PRIORITY,
        "TASK_MIN_PRIORITY": base.TASK_MIN_PRIORITY,
        "BaseTaskBackend": backends.BaseTaskBackend,
        "InvalidTask": getattr(errors, "InvalidTask", None) or errors.InvalidTaskError,
        "Task": base.Task,
        "TaskContext": base.TaskContext,
        "TaskError": base.TaskError,
        "TaskResult": base.TaskResult,
        "TaskResultDoesNotExist": errors.TaskResultDoesNotExist,
        "TaskResultStatus": base.TaskResultStatus,
        "normalize_json": importlib.import_module(json_home).normalize_json,
        "task_backends": root.task_backends,
        "task_enqueued": signals.task_enqueued,
        "task_finished": signals.task_finished,
        "task_started": signals.task_started,
    }
    return package, names


SOURCE, _NAMES = _load()
"""``SOURCE``: the package the API came from, ``django.tasks`` or ``django_tasks``."""

DEFAULT_TASK_QUEUE_NAME: str = _NAMES["DEFAULT_TASK_QUEUE_NAME"]
TASK_MAX_PRIORITY: int = _NAMES["TASK_MAX_PRIORITY"]
TASK_MIN_PRIORITY: int = _NAMES["TASK_MIN_PRIORITY"]
BaseTaskBackend: Any = _NAMES["BaseTaskBackend"]
InvalidTask: Any = _NAMES["InvalidTask"]
Task: Any = _NAMES["Task"]
TaskContext: Any = _NAMES["TaskContext"]
TaskError: Any = _NAMES["TaskError"]
TaskResult: Any = _NAMES["TaskResult"]
TaskResultDoesNotExist: Any = _NAMES["TaskResultDoesNotExist"]
TaskResultStatus: Any = _NAMES["TaskResultStatus"]
normalize_json: Any = _NAMES["normalize_json"]
task_backends: Any = _NAMES["task_backends"]
task_enqueued: Any = _NAMES["task_enqueued"]
task_finished: Any = _NAMES["task_finished"]
task_started: Any = _NAMES["task_started"]
