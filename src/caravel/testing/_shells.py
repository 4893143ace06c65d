"""The two kinds of queue the helpers accept: the async :class:`~caravel.DatabaseQueue`, whose
helpers return awaitables, and a synchronous shell around one (``caravel.SyncQueue``), whose
helpers run on the shell's own loop and return plain values."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar

from caravel.errors import ValidationError
from caravel.queue import DatabaseQueue

__all__ = ["SyncShell", "on_queue"]

T = TypeVar("T")


class SyncShell(Protocol):
    """What the helpers need of a synchronous queue: the async queue it wraps, and a way to run
    a coroutine function on that queue's loop and wait for its result."""

    @property
    def queue(self) -> DatabaseQueue: ...

    def call(self, fn: Callable[..., Coroutine[Any, Any, T]], /, *args: Any) -> T: ...


def on_queue(
    queue: DatabaseQueue | SyncShell, work: Callable[[DatabaseQueue], Coroutine[Any, Any, T]]
) -> Coroutine[Any, Any, T] | T:
    """Run ``work`` on the async queue: a coroutine to await for a :class:`DatabaseQueue`, the
    result itself for a synchronous shell (run on the shell's loop)."""
    if isinstance(queue, DatabaseQueue):
        return work(queue)
    inner = getattr(queue, "queue", None)
    if not isinstance(inner, DatabaseQueue) or not callable(getattr(queue, "call", None)):
        raise ValidationError("queue", "must be a DatabaseQueue or a SyncQueue")
    return queue.call(work, inner)
