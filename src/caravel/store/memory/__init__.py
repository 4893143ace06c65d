"""The in-memory store behind ``memory://`` URLs: the whole store protocol with no database, for
tests and local development.

It is **not durable** and it is **per process**: jobs live in this process's memory, are never
written anywhere, and are lost when the process exits. ``memory://`` opens a fresh, private
queue every time; ``memory://NAME`` opens the process-wide queue called NAME, so a queue, a
worker and an inspector opened on the same name in one process share its jobs (much as SQLite's
shared-cache memory databases do). A named queue lasts as long as the process.
"""

from __future__ import annotations

import threading

from sqlalchemy.engine import URL, make_url

from caravel.errors import ValidationError
from caravel.store.memory.reads import MemoryReader
from caravel.store.memory.store import MemoryStore
from caravel.store.memory.tables import Tables
from caravel.store.memory.workflows import MemoryWorkflowReads

__all__ = ["MemoryReader", "MemoryStore", "open_reader", "open_store"]

_named: dict[str, Tables] = {}
_named_lock = threading.Lock()


def _tables(url: str | URL) -> Tables:
    """The tables a ``memory://`` URL names: new ones, or the process's ones for NAME."""
    parsed = url if isinstance(url, URL) else make_url(url)
    extra = (parsed.database, parsed.username, parsed.password, parsed.port)
    if any(part is not None for part in extra) or parsed.query:
        raise ValidationError(
            "url", "a memory URL is memory:// (a private queue) or memory://NAME (a shared one)"
        )
    name = parsed.host
    if not name:
        return Tables()
    with _named_lock:
        found = _named.get(name)
        if found is None:
            found = _named[name] = Tables()
        return found


def open_store(url: str | URL) -> MemoryStore:
    """The store for a ``memory://`` URL."""
    return MemoryStore(_tables(url))


def open_reader(url: str | URL) -> MemoryReader:
    """A reader for a ``memory://`` URL: reads only, over the same tables a store opened on the
    same name writes."""
    return MemoryWorkflowReads(_tables(url))
