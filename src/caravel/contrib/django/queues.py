"""One :class:`~caravel.SyncQueue` per queue database and catalog, shared by every backend
instance and thread of the process (Django makes a backend per thread, and a queue keeps a
thread and connections of its own). Each closes itself at interpreter exit."""

from __future__ import annotations

import threading

from caravel.contrib.django.catalog import TaskCatalog
from caravel.options import QueueOptions
from caravel.sync import SyncQueue

__all__ = ["close_queues", "queue_for"]

_QUEUES: dict[tuple[str, int, int], SyncQueue] = {}
_LOCK = threading.Lock()


def queue_for(url: str, catalog: TaskCatalog, max_attempts: int) -> SyncQueue:
    key = (url, id(catalog), max_attempts)
    with _LOCK:
        queue = _QUEUES.get(key)
        if queue is None:
            options = QueueOptions(max_attempts=max_attempts)
            queue = _QUEUES[key] = SyncQueue(url, catalog.registry, options=options)
        return queue


def close_queues() -> None:
    """Close the queues this process opened (their connections), as before a test database
    is dropped; the next enqueue opens a queue again."""
    with _LOCK:
        queues = list(_QUEUES.values())
        _QUEUES.clear()
    for queue in queues:
        queue.close()
