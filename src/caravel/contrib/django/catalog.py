"""The tasks a backend knows: each Django task becomes a Caravel job type.

A worker never imports a name read from the database. It runs only the tasks of this catalog,
built from the ``tasks`` modules of ``INSTALLED_APPS`` (as the admin finds ``admin`` modules)
or from the explicit list in the backend's ``OPTIONS["TASKS"]``, both read from settings. A
stored job whose task is not in the worker's catalog fails as ``UnknownJobType``.

Each task gets a wire name made from its module path (lower case, any character outside
``[a-z0-9.]`` as ``-``) and a payload type of its own (the registry maps one type to one wire
name): a JSON model of the call's ``args`` and ``kwargs``.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from pydantic import BaseModel, ConfigDict, create_model

from caravel.contrib.django.compat import Task
from caravel.contrib.django.running import handler_for
from caravel.limits import MAX_WIRE_NAME_LENGTH
from caravel.registry import JobRegistry

__all__ = ["TaskCall", "TaskCatalog", "TaskEntry", "catalog_for", "wire_name_of"]

_OUTSIDE = re.compile(r"[^a-z0-9.]")


class TaskCall(BaseModel):
    """A task's call as stored: its positional and keyword arguments, JSON values only."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    args: list[Any] = []
    kwargs: dict[str, Any] = {}


@dataclass(frozen=True, slots=True)
class TaskEntry:
    """One task of the catalog: the Django task, its wire name and its payload type."""

    task: Any
    wire_name: str
    payload_type: type[TaskCall]


def wire_name_of(module_path: str) -> str:
    """The wire name of the task at ``module_path`` (``shop.tasks.send_receipt`` becomes
    ``shop.tasks.send-receipt``)."""
    return _OUTSIDE.sub("-", module_path.lower())


def _improperly(message: str) -> Exception:
    from django.core.exceptions import ImproperlyConfigured

    error: Exception = ImproperlyConfigured(f"caravel.contrib.django: {message}")
    return error


class TaskCatalog:
    """The tasks of one configuration, and the :class:`~caravel.JobRegistry` running them.

    Two tasks whose module paths give the same wire name, or a path longer than a wire name may
    be, are refused here, when the catalog is built, with ``ImproperlyConfigured``. ``alias``
    is the backend whose worker runs them (the results its handlers report are that
    backend's)."""

    def __init__(self, tasks: Iterable[Any], alias: str = "default") -> None:
        self.alias = alias
        self.registry = JobRegistry()
        self._by_path: dict[str, TaskEntry] = {}
        self._by_wire: dict[str, TaskEntry] = {}
        for task in tasks:
            self._add(task)

    def _add(self, task: Any) -> None:
        path: str = task.module_path
        if path in self._by_path:
            return  # the same task, imported under another name too
        wire = wire_name_of(path)
        if len(wire) > MAX_WIRE_NAME_LENGTH:
            raise _improperly(
                f"task {path!r}: its module path is longer than {MAX_WIRE_NAME_LENGTH} characters"
            )
        clash = self._by_wire.get(wire)
        if clash is not None:
            raise _improperly(
                f"tasks {clash.task.module_path!r} and {path!r} have the same wire name "
                f"{wire!r}; rename one of them"
            )
        payload_type = create_model(f"TaskCall{len(self._by_wire)}", __base__=TaskCall)
        entry = TaskEntry(task, wire, payload_type)
        self.registry.register(wire, payload_type, handler_for(task, self.alias))
        self._by_path[path] = entry
        self._by_wire[wire] = entry

    def entry_for(self, task: Any) -> TaskEntry | None:
        """The entry of ``task`` (by its module path), or ``None`` when it is not here."""
        return self._by_path.get(task.module_path)

    def entry_named(self, wire_name: str) -> TaskEntry | None:
        """The entry of a stored job type, or ``None``."""
        return self._by_wire.get(wire_name)

    def __iter__(self) -> Any:
        return iter(self._by_path.values())

    def __len__(self) -> int:
        return len(self._by_path)


def discover_tasks() -> list[Any]:
    """Every task defined in (or imported into) an installed app's ``tasks`` module."""
    from django.apps import apps
    from django.utils.module_loading import module_has_submodule

    found: list[Any] = []
    for app in apps.get_app_configs():
        if not module_has_submodule(app.module, "tasks"):
            continue
        module = import_module(f"{app.name}.tasks")
        found.extend(value for value in vars(module).values() if isinstance(value, Task))
    return found


def listed_tasks(paths: Iterable[str]) -> list[Any]:
    """The tasks ``OPTIONS["TASKS"]`` names, as dotted paths; each must be a task."""
    from django.utils.module_loading import import_string

    found: list[Any] = []
    for path in paths:
        try:
            value = import_string(path)
        except ImportError as exc:
            raise _improperly(f"OPTIONS['TASKS']: {path!r} could not be imported") from exc
        if not isinstance(value, Task):
            raise _improperly(f"OPTIONS['TASKS']: {path!r} is not a task")
        found.append(value)
    return found


_CATALOGS: dict[tuple[str, tuple[str, ...] | None], TaskCatalog] = {}
_LOCK = threading.RLock()


def catalog_for(alias: str, paths: tuple[str, ...] | None) -> TaskCatalog:
    """The process's one catalog of backend ``alias``, of ``paths`` (``None``: the installed
    apps' tasks), built on first use (never while the tasks modules are still importing:
    ``@task`` validates against the backend, and that must not need the catalog)."""
    with _LOCK:
        catalog = _CATALOGS.get((alias, paths))
        if catalog is None:
            tasks = discover_tasks() if paths is None else listed_tasks(paths)
            catalog = _CATALOGS[alias, paths] = TaskCatalog(tasks, alias)
        return catalog
