"""Opening the queue for a command: the library is imported when a command runs, not when the
command line starts (``caravel --help`` loads neither SQLAlchemy nor a driver)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from caravel.inspector import QueueInspector
    from caravel.queue import DatabaseQueue

__all__ = ["open_inspector", "open_writer", "process_url"]


def process_url(url: str) -> str:
    """``url``, unless it names a ``memory://`` store: that lives inside one process, and a
    command runs in a process of its own."""
    if url.strip().lower().startswith("memory:"):
        from caravel.errors import ValidationError

        raise ValidationError(
            "url",
            "a memory:// store lives inside one process and needs no migrations; this command "
            "runs in a process of its own and would see none of its jobs: use a sqlite:/// or "
            "postgresql:// URL",
        )
    return url


def open_inspector(url: str) -> QueueInspector:
    """A read-only inspector: the database refuses any write through it."""
    from caravel.inspector import QueueInspector

    return QueueInspector(process_url(url))


def open_writer(url: str) -> DatabaseQueue:
    """A queue for the operator's writes (replays), with no job registry: it never decodes a
    payload."""
    from caravel.queue import DatabaseQueue
    from caravel.registry import JobRegistry

    return DatabaseQueue(process_url(url), JobRegistry())
