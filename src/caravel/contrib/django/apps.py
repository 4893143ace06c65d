"""The Django app (``"caravel.contrib.django"`` in ``INSTALLED_APPS``): the migration that
applies the queue's schema, the management commands and the admin pages."""

from __future__ import annotations

from django.apps import AppConfig

__all__ = ["CaravelConfig"]


class CaravelConfig(AppConfig):
    name = "caravel.contrib.django"
    label = "caravel"
    verbose_name = "Caravel"
    default_auto_field = "django.db.models.AutoField"
