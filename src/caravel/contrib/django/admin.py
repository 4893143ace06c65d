"""The jobs of the queue that shares Django's database, in Django's admin: read-only (no add,
change or delete), filtered by state (the dead letters are ``state = dead_letter``), queue and
job type, with one action, *Replay*, for users who hold ``caravel.replay_job``. Replay goes
through the queue (:meth:`caravel.SyncQueue.replay`), so only dead letters are replayed, in
their exact queue and tenant. The admin reads the database of the ``default`` Caravel backend
(``OPTIONS["DATABASE"]``); a queue in a separate database has ``caravel dashboard`` instead."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from django.contrib import admin, messages

from caravel.contrib.django.models import Job

__all__ = ["JobAdmin"]


def _backend() -> Any:
    from caravel.contrib.django.commands import caravel_backend

    return caravel_backend("default")


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display: ClassVar[tuple[str, ...]] = (
        "id",
        "job_type",
        "queue",
        "tenant_id",
        "state",
        "attempt",
        "priority",
        "created",
        "finished",
        "last_failure",
        "error_class",
    )
    list_filter: ClassVar[tuple[str, ...]] = ("state", "queue", "job_type", "last_failure")
    search_fields: ClassVar[tuple[str, ...]] = ("=id", "job_type", "=tenant_id")
    actions: ClassVar[list[str]] = ["replay"]

    def get_queryset(self, request: Any) -> Any:
        return super().get_queryset(request).using(_backend().config.database)

    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_replay_permission(self, request: Any) -> bool:
        allowed: bool = request.user.has_perm("caravel.replay_job")
        return allowed

    def _created(self, job: Job) -> datetime | None:
        return Job.moment(job.created_at)

    def _finished(self, job: Job) -> datetime | None:
        return Job.moment(job.finished_at)

    # Django's decorators, applied as calls (they are untyped).
    created = admin.display(description="created")(_created)
    finished = admin.display(description="finished")(_finished)

    def _replay(self, request: Any, queryset: Any) -> None:
        queue = _backend().queue()
        replayed = skipped = 0
        for job in queryset:
            if queue.replay(job.id, job.queue, job.tenant_id):
                replayed += 1
            else:
                skipped += 1
        self.message_user(request, f"Replayed {replayed} job(s).", messages.SUCCESS)
        if skipped:
            self.message_user(
                request, f"{skipped} job(s) were not dead letters; unchanged.", messages.WARNING
            )

    replay = admin.action(description="Replay the selected dead letters", permissions=["replay"])(
        _replay
    )
