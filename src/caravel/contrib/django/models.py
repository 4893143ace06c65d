"""A read-only Django model over the queue's jobs table, for the admin (``managed = False``:
the table belongs to Caravel's migrations, and Django never creates or alters it). It lists
the stored identity and state of each job, never its payload or result."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from django.db import models

from caravel.clock import from_ms

__all__ = ["Job"]


class Job(models.Model):
    id = models.UUIDField(primary_key=True)
    queue = models.CharField(max_length=64)
    job_type = models.CharField(max_length=128)
    tenant_id = models.CharField(max_length=128)
    state = models.CharField(max_length=16)
    attempt = models.IntegerField()
    max_attempts = models.IntegerField()
    priority = models.SmallIntegerField()
    due_at = models.BigIntegerField()
    created_at = models.BigIntegerField()
    updated_at = models.BigIntegerField()
    finished_at = models.BigIntegerField(null=True)
    last_failure = models.CharField(max_length=32, null=True)
    error_class = models.CharField(max_length=200, null=True)
    tags = models.CharField(max_length=1041, null=True)

    class Meta:
        managed = False
        db_table = "caravel_jobs"
        ordering: ClassVar[list[str]] = ["-created_at"]
        default_permissions: ClassVar[tuple[str, ...]] = ("view",)
        permissions: ClassVar[list[tuple[str, str]]] = [
            ("replay_job", "Can replay dead-lettered jobs"),
        ]

    def __str__(self) -> str:
        return f"{self.job_type} {self.id}"

    @staticmethod
    def moment(ms: int | None) -> datetime | None:
        """A stored millisecond time as an aware datetime."""
        return None if ms is None else from_ms(ms)
