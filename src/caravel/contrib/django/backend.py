"""``CaravelBackend``: Caravel as the backend of Django's Tasks framework.

::

    TASKS = {
        "default": {
            "BACKEND": "caravel.contrib.django.CaravelBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"DATABASE": "default"},
        }
    }

Every enqueue is a Caravel job: durable when ``enqueue`` returns, claimed under a fenced lease,
retried with backoff, dead-lettered when its attempts are spent. When the queue shares
Django's database (the default), the job is inserted on Django's own connection, so
``transaction.atomic()`` covers it and a rollback drops it. With a separate queue database
(``OPTIONS["URL"]``) an enqueue inside ``atomic()`` is sent when the transaction commits.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from asgiref.sync import sync_to_async

from caravel.contrib.django.catalog import TaskCatalog, catalog_for
from caravel.contrib.django.compat import (
    BaseTaskBackend,
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultStatus,
    normalize_json,
    task_enqueued,
)
from caravel.contrib.django.config import BackendConfig, shared_driver_problem
from caravel.contrib.django.dispatch import dispatch_options
from caravel.contrib.django.queues import queue_for
from caravel.contrib.django.results import (
    CaravelTaskResult,
    enqueued_at,
    parse_result_id,
    result_id,
    stored_result,
)
from caravel.errors import ValidationError
from caravel.jobs import DEFAULT_TENANT
from caravel.preparation import prepare_job
from caravel.sync import SyncQueue
from caravel.validation import check_queue_name

__all__ = ["CaravelBackend"]


class CaravelBackend(BaseTaskBackend):
    """The backend Django creates from ``TASKS`` (see :mod:`caravel.contrib.django.config`
    for its ``OPTIONS``). Deferred tasks, async tasks, results and priorities are supported."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.config = BackendConfig.from_options(alias, self.options)
        for name in sorted(self.queues):
            try:
                check_queue_name(name, "QUEUES")
            except ValidationError as exc:
                from django.core.exceptions import ImproperlyConfigured

                raise ImproperlyConfigured(f"TASKS[{alias!r}]: {exc}") from None

    # ----- what Django asks of a backend ---------------------------------------------------

    def validate_task(self, task: Any) -> None:
        """Django's rules, and ours for the queue name (``[a-z0-9._-]``, 1 to 64)."""
        super().validate_task(task)
        try:
            check_queue_name(task.queue_name, "queue_name")
        except ValidationError as exc:
            raise InvalidTask(str(exc)) from None

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        self.validate_task(task)
        entry = self.catalog.entry_for(task)
        if entry is None:
            raise InvalidTask(
                f"Task {task.module_path!r} is not one this backend runs: define it in an "
                "installed app's tasks module, or list it in OPTIONS['TASKS']."
            )
        call = entry.payload_type(
            args=normalize_json(list(args)), kwargs=normalize_json(dict(kwargs))
        )
        dispatch = dispatch_options(task)
        queue = self.queue()
        job_id, repeated = self._insert(queue, call, dispatch)
        result = None
        if repeated:  # an idempotent repeat: the original job, as it is now
            result = self._stored(queue, dispatch.queue, job_id, dispatch.tenant_id)
        if result is None:
            result = CaravelTaskResult(
                task=task,
                id=result_id(dispatch.queue, job_id),
                status=TaskResultStatus.READY,
                enqueued_at=enqueued_at(job_id),
                started_at=None,
                finished_at=None,
                last_attempted_at=None,
                args=call.args,
                kwargs=call.kwargs,
                backend=self.alias,
                errors=[],
                worker_ids=[],
            )
        task_enqueued.send(type(self), task_result=result)
        return result

    async def aenqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        # On Django's thread for this request: the enqueue uses its database connection.
        return await sync_to_async(self.enqueue, thread_sensitive=True)(task, args, kwargs)

    def get_result(self, result_id: str) -> Any:
        """The result of a job of the default tenant; :func:`caravel.contrib.django.result`
        reads another tenant's."""
        return self.get_tenant_result(result_id, DEFAULT_TENANT)

    async def aget_result(self, result_id: str) -> Any:
        return await sync_to_async(self.get_result, thread_sensitive=True)(result_id)

    def check(self, **kwargs: Any) -> list[Any]:
        """Django's system check (``manage.py check``, ``runserver``, ``migrate``): the task
        catalog builds, so a wire-name clash or a bad ``OPTIONS["TASKS"]`` entry is reported
        at start-up rather than at the first enqueue."""
        from django.core import checks
        from django.core.exceptions import ImproperlyConfigured

        found = list(super().check(**kwargs))
        try:
            _ = self.catalog
        except ImproperlyConfigured as exc:
            found.append(checks.Error(str(exc), obj=f"TASKS[{self.alias!r}]", id="caravel.E001"))
        problem = self._shared_driver_problem()
        if problem is not None:
            found.append(checks.Error(problem, obj=f"TASKS[{self.alias!r}]", id="caravel.E002"))
        return found

    # ----- Caravel's side ------------------------------------------------------------------

    @property
    def catalog(self) -> TaskCatalog:
        """The tasks this backend runs (built on first use)."""
        return catalog_for(self.alias, self.config.tasks)

    def queue(self) -> SyncQueue:
        """The process's queue on this backend's database."""
        return queue_for(self.config.queue_url(), self.catalog, self.config.max_attempts)

    def get_tenant_result(self, result_id: str, tenant_id: str) -> Any:
        """The result of a job of ``tenant_id`` (exactly, as every lookup of ours), or
        ``TaskResultDoesNotExist``."""
        parsed = parse_result_id(result_id)
        if parsed is None:
            raise TaskResultDoesNotExist(result_id)
        queue_name, job_id = parsed
        result = self._stored(self.queue(), queue_name, job_id, tenant_id)
        if result is None:
            raise TaskResultDoesNotExist(result_id)
        return result

    def _stored(self, queue: SyncQueue, queue_name: str, job_id: UUID, tenant: str) -> Any:
        status = queue.get_status(job_id, queue_name, tenant)
        if status is None:
            return None
        entry = self.catalog.entry_named(status.job_type)
        payload = queue.get_payload(job_id, queue_name, tenant)
        if entry is None or payload is None:
            return None  # not a task of ours (or pruned meanwhile): nothing to show it as
        call = entry.payload_type.model_validate_json(payload)
        task = self._as_stored(entry.task, status.queue, status.priority)
        # The errors come from the attempt records: the job's own, matched as its status was.
        attempts = queue.get_attempts(job_id, queue_name, tenant) or []
        return stored_result(task, self.alias, status, call, attempts)

    def _as_stored(self, task: Any, queue_name: str, priority: int) -> Any:
        """``task`` as this job was enqueued: on this backend (so ``refresh()`` reads here),
        its queue and priority; the task as defined if the settings no longer allow that."""
        try:
            return task.using(backend=self.alias, queue_name=queue_name, priority=priority)
        except InvalidTask:
            return task

    def _shared_driver_problem(self) -> str | None:
        """Why the queue cannot insert on its shared database's Django connection, if it
        cannot (:func:`~caravel.contrib.django.config.shared_driver_problem`)."""
        from django.db import connections

        if not self.config.shares_database or self.config.database not in connections:
            return None
        wrapper = connections[self.config.database]
        return shared_driver_problem(
            self.config.database, wrapper.vendor, wrapper.Database.__name__
        )

    def _insert(self, queue: SyncQueue, call: Any, dispatch: Any) -> tuple[UUID, bool]:
        """Insert the job: on Django's connection, in its open transaction, when the queue
        shares the database; else at once, or on commit when inside ``atomic()``."""
        from django.core.exceptions import ImproperlyConfigured
        from django.db import connections, transaction

        connection = connections[self.config.database]
        if self.config.shares_database:
            problem = self._shared_driver_problem()
            if problem is not None:
                raise ImproperlyConfigured(f"TASKS[{self.alias!r}]: {problem}")
            connection.ensure_connection()
            outcome = queue.enqueue(call, dispatch, session=connection.connection)
            return outcome.job_id, outcome.already_enqueued
        if not connection.in_atomic_block:
            outcome = queue.enqueue(call, dispatch)
            return outcome.job_id, outcome.already_enqueued
        inner = queue.queue
        new_job = prepare_job(inner.registry, inner.options, call, dispatch, inner.clock.now_ms())

        def send() -> None:
            queue.call(inner.insert_prepared, [new_job])

        # A rollback drops it; a crash between the commit and this insert loses it (use the
        # shared database, or an outbox, where that matters).
        transaction.on_commit(send, using=self.config.database)
        return new_job.id, False
