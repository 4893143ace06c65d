"""Applies the queue's schema through Caravel's own migrations (see
:mod:`caravel.contrib.django.schema`); reversible. Not atomic: Caravel's migrations run on a
connection of their own, which must not wait for a transaction of Django's."""

from __future__ import annotations

from typing import ClassVar

from django.db import migrations

from caravel.contrib.django.schema import reverse, upgrade


class Migration(migrations.Migration):
    atomic = False
    initial = True
    dependencies: ClassVar[list[tuple[str, str]]] = []
    operations: ClassVar[list[object]] = [
        migrations.RunPython(upgrade, reverse, elidable=False),
    ]
