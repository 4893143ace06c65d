"""The job registry ``manage.py caravel_worker`` hands to Caravel's worker (as
``--app caravel.contrib.django.worker_app:registry``): the catalog of the backend it was
started for, set by the command before the worker loads it."""

from __future__ import annotations

from caravel.registry import JobRegistry

__all__ = ["registry"]

registry: JobRegistry | None = None
