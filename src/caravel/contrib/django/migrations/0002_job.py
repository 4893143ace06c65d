"""The admin's read-only model over ``caravel_jobs`` (unmanaged: nothing is created; Django
records it for its permissions, ``view_job`` and ``replay_job``)."""

from __future__ import annotations

from typing import ClassVar

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies: ClassVar[list[tuple[str, str]]] = [("caravel", "0001_queue_schema")]
    operations: ClassVar[list[object]] = [
        migrations.CreateModel(
            name="Job",
            fields=[
                ("id", models.UUIDField(primary_key=True, serialize=False)),
                ("queue", models.CharField(max_length=64)),
                ("job_type", models.CharField(max_length=128)),
                ("tenant_id", models.CharField(max_length=128)),
                ("state", models.CharField(max_length=16)),
                ("attempt", models.IntegerField()),
                ("max_attempts", models.IntegerField()),
                ("priority", models.SmallIntegerField()),
                ("due_at", models.BigIntegerField()),
                ("created_at", models.BigIntegerField()),
                ("updated_at", models.BigIntegerField()),
                ("finished_at", models.BigIntegerField(null=True)),
                ("last_failure", models.CharField(max_length=32, null=True)),
                ("error_class", models.CharField(max_length=200, null=True)),
                ("tags", models.CharField(max_length=1041, null=True)),
            ],
            options={
                "db_table": "caravel_jobs",
                "ordering": ["-created_at"],
                "default_permissions": ("view",),
                "permissions": [("replay_job", "Can replay dead-lettered jobs")],
                "managed": False,
            },
        ),
    ]
