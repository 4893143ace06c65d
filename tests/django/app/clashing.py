"""Two tasks whose module paths differ only in case: one wire name, refused."""

from __future__ import annotations

from tests.django.app.tasks import task


@task
def notify() -> None:
    pass


@task
def Notify() -> None:
    pass
