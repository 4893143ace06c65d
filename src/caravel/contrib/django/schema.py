"""``manage.py migrate`` applies (and reverses) the queue's schema by delegating to Caravel's
own Alembic history (:mod:`caravel.migrate`): one schema source, kept in its own version
table, whichever tool runs it.

When Django migrates a database alias, every Caravel backend in ``TASKS`` whose queue shares
that alias is upgraded (or, in reverse, downgraded to nothing); a backend with a separate
``URL`` is upgraded along with the ``default`` alias.
"""

from __future__ import annotations

from typing import Any

from caravel import migrate

__all__ = ["queue_urls", "reverse", "upgrade"]


def queue_urls(using: str) -> list[str]:
    """The queue databases of the Caravel backends that migrate with database ``using``."""
    from django.conf import settings

    from caravel.contrib.django.config import BackendConfig

    urls: list[str] = []
    for alias, params in getattr(settings, "TASKS", {}).items():
        if params.get("BACKEND") != "caravel.contrib.django.CaravelBackend":
            continue
        config = BackendConfig.from_options(alias, params.get("OPTIONS", {}))
        ours = config.database == using if config.shares_database else using == "default"
        url = config.queue_url()
        if ours and url not in urls:
            urls.append(url)
    return urls


def upgrade(apps: Any, schema_editor: Any) -> None:
    for url in queue_urls(schema_editor.connection.alias):
        migrate.upgrade(url)


def reverse(apps: Any, schema_editor: Any) -> None:
    # Not forced: while a queue holds rows it would delete, this raises DowngradeRefusedError
    # and the operator drops them on purpose (`caravel db downgrade --force base`).
    for url in queue_urls(schema_editor.connection.alias):
        migrate.downgrade(url, "base")
